"""StepOptions: how a model's training step runs, the options of ``Model.compile``, checked in
one place.

``StepOptions(use_graph, sequential, recompute, offload, budget, async_offload, concurrency,
memory, fuse, precision)``
holds them as given; ``check(device)`` refuses every value and every pair that cannot work
(one-line errors that name the argument and what to give instead) and returns them
normalised: the budget in bytes. ``Model.compile`` checks its arguments with it, and
``plan()`` its own (``caller="plan"`` names it in the messages).
"""

import dataclasses

from nnmem.graph import offload, recompute
from nnmem.graph.concurrency import check_policy as check_concurrency
from nnmem.memory import format_bytes, parse_bytes

#: Who decides what each tensor does: the papers' rules, or the solver (graph/optimal.py).
MEMORY = ("heuristic", "optimal")
#: The step's arithmetic: all float32, or mixed (float16 storage, optim/mixed_precision.py).
PRECISIONS = ("float32", "float16")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """What Model.compile documents: use_graph, sequential (replay order), recompute (a
    recompute policy), offload (an offload policy), budget (None, bytes, or text such as
    "1GiB" before check), async_offload (vDNNExt's engine or vDNN's), concurrency, and
    memory: "heuristic" (the policies decide) or "optimal" (graph/optimal.py decides per
    tensor, fastest within the budget); fuse: graph mode's fusion pass (graph/fuse.py);
    precision: "float32" or "float16" (mixed precision, optim/mixed_precision.py)."""

    use_graph: bool = False
    sequential: bool = False
    recompute: str = "none"
    offload: str = "none"
    budget: object = None
    async_offload: bool = True
    concurrency: str = "off"
    memory: str = "heuristic"
    fuse: bool = True
    precision: str = "float32"

    def check(self, device, caller="compile"):
        """These options with the budget in bytes, or a ValueError (TypeError for a wrong
        type) that says what to give instead. device: the device the step runs on; None
        where there is none yet (plan() makes a planning device of its own, without limit),
        and then nothing is checked against a device's pool or kind."""
        # (here `recompute` and `offload` are the modules that list the policies)
        concurrency = self.concurrency
        if self.recompute not in recompute.POLICIES:
            raise ValueError(
                f"{caller}(recompute={self.recompute!r}): choose one of {recompute.POLICIES}"
            )
        if self.recompute != "none" and not self.use_graph:
            raise ValueError(
                "recomputation rewrites a recorded step: compile with "
                "use_graph=True to use recompute=" + repr(self.recompute)
            )
        if self.offload not in offload.POLICIES:
            raise ValueError(
                f"{caller}(offload={self.offload!r}): choose one of {offload.POLICIES}"
            )
        if self.offload == "dyn" and self.budget is None:
            raise ValueError(
                f"{caller}(offload='dyn') picks the fastest policy that fits a budget: give one, "
                "e.g. budget='1GiB'"
            )
        if not isinstance(self.async_offload, bool):
            raise TypeError(f"{caller}(async_offload={self.async_offload!r}): give True or False")
        check_concurrency(concurrency)
        self._check_memory(caller)
        if not isinstance(self.fuse, bool):
            raise TypeError(f"{caller}(fuse={self.fuse!r}): give True or False")
        if self.precision not in PRECISIONS:
            why = " (NumPy has no bfloat16 dtype to store it in)" * (self.precision == "bfloat16")
            raise ValueError(
                f"{caller}(precision={self.precision!r}): choose one of {PRECISIONS}{why}"
            )
        if concurrency != "off":
            if not self.use_graph:
                raise ValueError(
                    f"{caller}(concurrency={concurrency!r}) controls a recorded step's threads: "
                    "compile with use_graph=True"
                )
            if device is not None and device.kind != "cpu":
                raise ValueError(
                    f"{caller}(concurrency={concurrency!r}): thread counts are for the CPU device "
                    f"(this is a {device.kind} device); leave concurrency='off'"
                )
            if self.offload != "none":
                raise ValueError(
                    f"{caller}(concurrency={concurrency!r}, offload={self.offload!r}): the two "
                    "cannot be combined yet (the transfer engine orders the calls itself)"
                )
            if self.sequential and concurrency in ("1-3", "1-4", "auto"):
                raise ValueError(
                    f"{caller}(concurrency={concurrency!r}) co-runs operations as BFS finds them "
                    "ready: compile with sequential=False, or use concurrency='1-2'"
                )
            check_concurrency(concurrency, device)
        budget = None if self.budget is None else self._budget_bytes(device, caller)
        return dataclasses.replace(self, budget=budget)

    def _check_memory(self, caller):
        """memory="optimal" decides recomputation and offloading itself, within a budget."""
        if self.memory not in MEMORY:
            raise ValueError(f"{caller}(memory={self.memory!r}): choose one of {MEMORY}")
        if self.memory == "heuristic":
            return
        if not self.use_graph:
            raise ValueError(
                f"{caller}(memory='optimal') plans a recorded step: compile with use_graph=True"
            )
        if self.budget is None:
            raise ValueError(
                f"{caller}(memory='optimal') finds the fastest plan within a budget: give one, "
                "e.g. budget='1GiB'"
            )
        asked = [
            f"{name}={value!r}"
            for name, value, default in (
                ("recompute", self.recompute, "none"),
                ("offload", self.offload, "none"),
                ("concurrency", self.concurrency, "off"),
            )
            if value != default
        ]
        if asked:
            raise ValueError(
                f"{caller}(memory='optimal', {', '.join(asked)}): the optimal plan decides "
                "recomputation and offloading per tensor itself; leave recompute='none', "
                "offload='none' and concurrency='off', or use memory='heuristic'"
            )

    def _budget_bytes(self, device, caller):
        """The budget in bytes (a number, or text such as "1.5GiB"), checked against the pool."""
        budget = self.budget
        try:
            nbytes = parse_bytes(budget)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{caller}(budget={budget!r}): {e}") from None
        if nbytes <= 0 or (device is not None and nbytes > device.pool.capacity):
            bound = ""  # no device yet: no pool to be smaller than
            if device is not None:
                capacity = device.pool.capacity
                bound = (
                    f" no larger than the device pool ({format_bytes(capacity)}), e.g. "
                    f"budget='{max(capacity // 2**21, 1)}MiB'"
                )
            raise ValueError(f"{caller}(budget={budget!r}): give a positive number of bytes{bound}")
        return nbytes
