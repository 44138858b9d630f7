"""nnmem plan's searches: the deepest ResNet (--find-depth) or the largest batch (--find-batch)
that fits --budget, with one line per probe on stderr as the search goes (progress.py), and
the steps it plans, each planned once (Plans).

A step fits when one of its techniques fits, so a search answers for the technique of the
smallest peak (usually an offloading one); the line under its answer names it.
"""

import math
import sys

from nnmem.cli.arguments import UsageError
from nnmem.cli.plan_table import size_format, technique_name
from nnmem.cli.progress import Progress
from nnmem.memory import format_bytes
from nnmem.search import largest_within


class StepTooLarge(UsageError):
    """A step larger than the planning device's pool (1 PiB), or whose sizes overflow: the
    --input or --width is too large. `capacity` is the pool's size (None for an overflow)."""

    def __init__(self, message, capacity=None):
        super().__init__(message)
        self.capacity = capacity


class Plans:
    """The steps the flags describe, each planned once: a search's answer is printed and viewed
    without planning it again. `plan_step(batch, depth, tensors=..., progress=...)` plans one
    (a StepPlan), or raises StepTooLarge; get(batch, depth) returns that error rather than
    raising it, so that a search passes over the step (nnmem plan raises it for the step it
    prints)."""

    def __init__(self, args, plan_step):
        self.args, self.plan_step, self.planned = args, plan_step, {}

    def get(self, batch, depth, progress=None):
        """The plan of the step (batch, depth). `progress`: the stage callback of a search's
        probe; without it, planning that takes long says so on a Progress line of its own."""
        if (batch, depth) not in self.planned:
            if progress is None:
                with Progress("plan", f"planning {step_name(self.args, batch, depth)}") as p:
                    self.planned[batch, depth] = self._plan_or_error(batch, depth, p.stage)
            else:
                self.planned[batch, depth] = self._plan_or_error(batch, depth, progress)
        return self.planned[batch, depth]

    def with_tensors(self, batch, depth):
        """The step planned again, keeping each technique's tensors (the memory viewer's rows;
        a search keeps none while it probes)."""
        what = f"planning {step_name(self.args, batch, depth)} for the viewer"
        with Progress("plan", what) as p:
            return self.plan_step(batch, depth, tensors=True, progress=p.stage)

    def _plan_or_error(self, batch, depth, progress):
        try:
            return self.plan_step(batch, depth, progress=progress)
        except StepTooLarge as e:
            return e


def step_name(args, batch, depth):
    """A step's name on the progress lines: "resnet-110 at batch 16"."""
    return f"{args.model}{'' if depth is None else f'-{depth}'} at batch {batch}"


def find_depth(args, plans, depths):
    """Print and return the deepest of `depths` that fits --budget (None if none does)."""
    depth = _search(args, "depth", depths, lambda d: (args.batch_size, d), plans)
    print(f"deepest ResNet that fits {format_bytes(args.budget)}: {_found(depth, depths)}")
    _say_technique(args, "depth", depth if depth is not None else depths[0], plans, depth)
    return depth


def find_batch(args, plans, batches):
    """Print and return the largest of `batches` that fits --budget (None if none does)."""
    batch = _search(args, "batch", batches, lambda b: (b, args.depth), plans)
    print(f"largest batch that fits {format_bytes(args.budget)}: {_found(batch, batches)}")
    _say_technique(args, "batch", batch if batch is not None else batches[0], plans, batch)
    return batch


def _search(args, what, candidates, step_of, plans):
    """The last of `candidates` (depths or batches) whose step, step_of(candidate) = (batch,
    depth), fits --budget under one of the techniques at least. largest_within aims each probe
    with the smallest peaks of the probes before it: peaks grow about linearly with the depth
    and with the batch, so a few probes find the end even among deep networks, each of which
    takes seconds to plan. Each probe is one line on stderr, written as it starts and finished
    with its outcome."""
    print(
        f"nnmem plan: searching the {'deepest ResNet' if what == 'depth' else 'largest batch'} "
        f"that fits {format_bytes(args.budget)}, {what} {candidates[0]} to {candidates[-1]}; "
        "each probe plans one step with every technique",
        file=sys.stderr,
    )
    probes = 0

    def smallest_peak(candidate):
        nonlocal probes
        probes += 1
        batch, depth = step_of(candidate)
        with Progress(
            "plan", f"probe {probes}: {step_name(args, batch, depth)}", at_once=True
        ) as p:
            step = plans.get(batch, depth, p.stage)
            peak_bytes = _peak(step, args.budget)
            p.outcome = _outcome(step, args.budget, peak_bytes <= args.budget)
        return peak_bytes

    return largest_within(smallest_peak, candidates, args.budget)


def _outcome(step, budget, fitting):
    """How a probe ended, for its line on stderr: whether its step fits and its smallest peak."""
    if isinstance(step, StepTooLarge):
        return "too large to plan: does not fit"
    best = step.best()
    peak, limit = _sizes(best.peak_bytes, budget)
    verdict = "fits" if fitting else "does not fit"
    return f"{verdict} {limit}: peak {peak} with {technique_name(best)}"


def _say_technique(args, what, value, plans, found):
    """The line under a search's answer: the technique it was found under. A step fits when
    one of its techniques fits, so each probe stands for the technique of its smallest peak
    (usually an offloading one, which keeps least on the device)."""
    batch, depth = (value, args.depth) if what == "batch" else (args.batch_size, value)
    step = plans.get(batch, depth)
    if isinstance(step, StepTooLarge):
        return  # the first candidate, too large to plan: its probe's line said so
    best = step.best()
    peak, _ = _sizes(best.peak_bytes, args.budget)
    smallest = "" if found is not None else ", the smallest"
    print(
        f"  searched under the technique of smallest peak at each {what}: at {what} {value}"
        f"{smallest}, {technique_name(best)} ({peak})"
    )


def _sizes(peak, budget):
    """A peak and a budget as the search's lines write them: each in its own unit (a peak of
    769.6 MiB reads as such against 1000 TiB), or, when that writes them alike, in the digits
    that tell them apart (plan_table.size_format: 11.95 GiB against 12.00 GiB)."""
    texts = format_bytes(peak), format_bytes(budget)
    if texts[0] != texts[1]:
        return texts
    size = size_format([peak, budget])
    return size(peak), size(budget)


def _peak(planned, budget):
    """A step's smallest peak, for the searches: `planned` is what Plans.get returns, a
    StepPlan or the StepTooLarge error. A step too large to plan needs more than the planning
    pool: more than any budget no larger than that pool (math.inf); a budget beyond it cannot
    be decided, and the error says so."""
    if isinstance(planned, StepTooLarge):
        if planned.capacity is not None and budget > planned.capacity:
            raise planned
        return math.inf
    return planned.best().peak_bytes


def _found(value, candidates):
    """How a search's result reads: "none", the value, or, when the search reached its last
    candidate, "at least N (the search stops at N)"."""
    if value is None:
        return "none"
    if value == candidates[-1]:
        return f"at least {value} (the search stops at {value})"
    return str(value)
