"""nnmem plan's table: one row per technique, and the sizes in it written so that two different
sizes never read the same.

format_bytes rounds to one decimal of the nearest unit, so a peak of 2047.3 MiB that fits a
2 GiB budget and one of 2048.6 MiB that does not both read "2.0 GiB". The table writes every
size in one unit, with as many decimals as it takes to tell its sizes (and the budget) apart.
"""

from nnmem.cli.arguments import format_shape
from nnmem.memory import format_bytes

#: The units of a table, the largest size in it below 10240 of its unit: four or five digits
#: before the point, e.g. 7065.3 MiB rather than 6.9 GiB.
UNITS = [("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40), ("PiB", 2**50)]
#: Beyond this many decimals, sizes are written in exact bytes.
MAX_DECIMALS = 3


def size_format(sizes):
    """A function that writes a byte count for a table holding `sizes` (ints): in the unit in
    which the largest reads below 10240 (KiB to PiB), with the fewest decimals (1 to
    MAX_DECIMALS) that write every two different sizes differently; failing that, the same in
    the next smaller unit, while the largest reads below 100000 there (a peak of 1023.7 MiB
    against a budget of 1 GiB: both read 1.000 GiB); in exact bytes when nothing does (two
    sizes a few bytes apart)."""
    sizes = {int(size) for size in sizes}
    largest = max(sizes, default=0)
    natural = next((i for i, (_, u) in enumerate(UNITS) if largest < 10_240 * u), len(UNITS) - 1)
    for name, unit in (UNITS[natural], UNITS[max(natural - 1, 0)]):
        if largest >= 100_000 * unit:  # six digits before the point: exact bytes read better
            continue
        for decimals in range(1, MAX_DECIMALS + 1):
            if len({f"{size / unit:.{decimals}f}" for size in sizes}) == len(sizes):
                return lambda size, d=decimals, n=name, u=unit: f"{size / u:.{d}f} {n}"
    return lambda size: f"{size} B"


def technique_name(technique):
    """A TechniquePlan's name as the table writes it, with its offload policy."""
    if technique.offload in ("none", "optimal"):
        return technique.technique
    return f"{technique.technique} ({technique.offload})"


def print_plan(step, budget):
    """Print `step` (a StepPlan), one row per technique: its peak, its lower bound, the count
    of tensors live at the peak, its recomputed operations, the host memory its offloading
    takes, whether it fits `budget` (bytes, or None) and the operation at its peak."""
    techniques = step.techniques
    # The sizes that must never read the same: the peaks, which decide "fits" against the
    # budget. (A lower bound a few bytes under its peak may read the same: exact bytes for the
    # whole table would be the price of telling them apart.)
    size = size_format([t.peak_bytes for t in techniques] + [budget] * (budget is not None))
    sizes = [step.persistent_bytes] + [budget] * (budget is not None)
    for t in techniques:
        sizes += [t.peak_bytes, t.lower_bound_bytes] + [t.host_bytes] * (t.offload != "none")
    print(
        f"{step.model}, input {format_shape(step.input_shape)}: {step.nodes} recorded operations; "
        f"parameters, optimizer state, inputs and results {format_bytes(step.persistent_bytes)}"
    )
    fusion = step.fusion
    if fusion.chains:
        chains = ", ".join(f"{op} {count}" for op, count in sorted(fusion.chains.items()))
        print(
            f"  fusion: {sum(fusion.chains.values())} kernel calls in place of chains ({chains}); "
            f"{fusion.removed} intermediate tensors fewer; liveness peak "
            f"{fusion_peak(fusion.saved_bytes)}"
        )
    width = max(11, *(len(size(s)) for s in sizes))
    budget_column = "" if budget is None else f"budget {size(budget)}".ljust(len("does not fit"))
    print(
        f"  {'technique':26}  {'peak':>{width}}  {'lower bound':>{width}}  "
        f"{'tensors live at peak':>20}  {'extra ops':>9}  {'on host':>{width}}  "
        + (f"{budget_column}  " if budget_column else "")
        + "peak at"
    )
    for t in techniques:
        host = size(t.host_bytes) if t.offload != "none" else "-"
        fits = "" if budget is None else ("fits" if t.fits(budget) else "does not fit")
        print(
            f"  {technique_name(t):26}  {size(t.peak_bytes):>{width}}  "
            f"{size(t.lower_bound_bytes):>{width}}  {t.live_tensors_at_peak:>20}  "
            f"{t.recomputations:>9}  {host:>{width}}  "
            + (f"{fits:{len(budget_column)}}  " if budget_column else "")
            + t.peak_operation
        )
    if budget is not None and not any(t.fits(budget) for t in techniques):
        best = step.best()
        print(
            f"no technique fits {format_bytes(budget)}: the smallest peak reachable is "
            f"{size(best.peak_bytes)} ({technique_name(best)}), set by {best.peak_operation}"
        )


def fusion_peak(saved):
    """The fused liveness peak beside the unfused one, from the bytes fusion saved: "the same
    as unfused", or an amount "lower" or "higher" (where the fused layout lands above: the
    greedy layout is a heuristic), never a negative amount."""
    if saved == 0:
        return "the same as unfused"
    return f"{format_bytes(abs(saved))} {'lower' if saved > 0 else 'higher'} than unfused"
