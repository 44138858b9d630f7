"""StepCache: a model's recorded steps in graph mode, compiled, and the one each call replays.

A call of the model looks its arguments up by their key (the mode, each tensor's shape and
dtype, every other argument's value); the first call with a new key records the step (no
kernel runs), compiles the recording (nnmem.graph) and keeps it; every call, that first one
included, runs the compiled step. A first run that fails before its commit keeps nothing.

With offload="dyn" (vDNN's dynamic policy), compiling picks the fastest offload policy that
fits the budget; when none does with the convolutions' fastest workspaces, the step is
recorded again under a lower cap on them (WORKSPACE_LIMITS). memory="optimal" does the same
when no plan fits. A cap never takes a convolution pass below one sample group, the smallest
workspace that computes the same numbers (ops/conv.py), so no cap changes a bit.
"""

from collections.abc import Hashable

from nnmem.graph.executor import CompiledStep, PlanTooLarge
from nnmem.graph.optimal import NoPlanFits
from nnmem.graph.recorder import Recorder
from nnmem.memory.errors import OutOfMemory
from nnmem.tensor import Tensor

#: offload="dyn" and memory="optimal": the caps on a convolution's workspace tried in turn
#: (None: no cap; 0: one sample group per pass, the least that keeps every number).
WORKSPACE_LIMITS = (None, 64 * 2**20, 16 * 2**20, 4 * 2**20, 2**20, 0)


class StepCache:
    """{key: CompiledStep} of one model (whose class is named `owner`, for messages)."""

    def __init__(self, owner):
        self.owner = owner
        self.compiled = {}

    def __len__(self):
        return len(self.compiled)

    def values(self):
        return self.compiled.values()

    def find(self, training, inputs, kwargs):
        """The CompiledStep recorded for these arguments in this mode, or None."""
        return self.compiled.get(self.key(training, inputs, kwargs))

    def key(self, training, inputs, kwargs=None):
        """What selects a recorded graph: the mode, each tensor's shape and dtype, and every
        other argument's value (a list or tuple by its items). A value without a hash (a NumPy
        array, a dict) is refused: the step reads it while recording and the replay would
        reuse what it read then, whatever the later call passes."""

        def key(value, where):
            if isinstance(value, Tensor):
                return value.shape, value.dtype
            if isinstance(value, (list, tuple)):
                return type(value), tuple(key(v, where) for v in value)
            if not isinstance(value, Hashable):
                raise TypeError(
                    f"{self.owner}(...) in graph mode: {where} is a "
                    f"{type(value).__name__}; graph mode replays the step recorded for each "
                    "value of a non-tensor argument, so pass tensors, or values with a hash "
                    "(str, int, float, None, tuples of them)"
                )
            return value

        return (
            (training,)
            + tuple(key(t, f"argument {i}") for i, t in enumerate(inputs))
            + tuple(
                (name, key(value, f"argument {name}="))
                for name, value in sorted((kwargs or {}).items())
            )
        )

    def run(self, dev, step, training, inputs, kwargs, options, host_values):
        """step(*inputs, **kwargs) as a compiled step on `dev`: replayed, or recorded and
        compiled with `options` (StepOptions) first. host_values(): what the replay's kernels
        read from Python when they are launched (Model._host_values)."""
        key = self.key(training, inputs, kwargs)
        compiled = self.compiled.get(key)
        tensors = _tensors_of(inputs, kwargs)
        if compiled is not None:
            return compiled.replay(tensors, host_values)
        shapes = ", ".join("x".join(map(str, t.shape)) for t in tensors)
        label = f"{self.owner} ({'training' if training else 'inference'}, {shapes})"
        try:
            compiled, result = self._record_and_compile(
                dev, step, inputs, kwargs, tensors, label, options
            )
        except OutOfMemory as e:
            e.add_note(
                f"graph mode planned this step ({label}) with recompute="
                f"{options.recompute!r} and offload={options.offload!r}: "
                "compile(..., recompute='cost-aware') and offload='all' lower its peak; "
                "`nnmem plan` shows the figures of each technique beforehand"
            )
            raise
        self.compiled[key] = compiled
        if not dev.runs_kernels:  # planned, not run: values exist only on a real device
            return result
        commits = dev.commits
        try:
            return compiled.replay(tensors)
        except BaseException:
            if dev.commits == commits:  # its first run failed before the commit: keep nothing
                del self.compiled[key]  # (so the undo forgets the optimizer state it made)
                compiled.leave_arenas()
                dev.fit_arenas()  # an arena it grew shrinks back to the other steps' plans
            raise

    def _record_and_compile(self, dev, step, inputs, kwargs, tensors, label, options):
        """(CompiledStep, result). With offload="dyn": the fastest policy that fits the budget
        with the convolutions' fastest workspaces; failing that, the step is recorded again
        with a lower cap on workspaces (the convolutions with the largest downgrade first:
        fewer samples per chunk, then the direct algorithm)."""
        if options.memory == "optimal":
            return self._record_optimal(dev, step, inputs, kwargs, tensors, label, options)
        limits = WORKSPACE_LIMITS if options.offload == "dyn" else (dev.workspace_limit,)
        for limit in limits:
            with dev.limit_workspaces(limit):
                recorder, result = _record(dev, step, inputs, kwargs)
            try:
                compiled = CompiledStep(dev, recorder, tensors, result, label, options)
            except PlanTooLarge as e:
                too_large = e
                continue
            compiled.workspace_limit = limit
            return compiled, result
        error = OutOfMemory(
            request=too_large.needed,
            free_bytes=too_large.budget,
            largest_free_block=too_large.budget,
            capacity=too_large.budget,
            requester=f"{label} with offload='dyn' and direct convolutions (no workspace)",
        )
        error.add_note(
            f"offload='dyn' tried every policy and workspace: the smallest plan (offload='all', "
            f"direct convolutions) needs {too_large.needed} bytes of pool, the budget is "
            f"{too_large.budget}; raise the budget or use a smaller batch"
        )
        raise error

    def _record_optimal(self, dev, step, inputs, kwargs, tensors, label, options):
        """(CompiledStep, result) with memory="optimal": recorded with the budget lifted (the
        workspaces sized from the pool alone, so the step is the same at every budget), then
        planned within the budget (graph/optimal.py); when no plan fits, recorded again with
        smaller convolution workspaces (WORKSPACE_LIMITS), and NoPlanFits names the smallest
        budget of the last (the smallest workspaces)."""
        for limit in WORKSPACE_LIMITS:
            with dev.without_budget(), dev.limit_workspaces(limit):
                recorder, result = _record(dev, step, inputs, kwargs)
            try:
                compiled = CompiledStep(dev, recorder, tensors, result, label, options)
            except NoPlanFits as e:
                # nothing of this try may hold bytes while the next one records and plans:
                # not its results, nor the error's frames (which refer to them)
                too_large = e.with_traceback(None)
                del recorder, result
                continue
            compiled.workspace_limit = limit
            return compiled, result
        raise too_large


def _record(dev, step, inputs, kwargs):
    """(recorder, result): the step recorded, nothing run."""
    recorder = Recorder()
    with dev.recording(recorder):
        result = step(*inputs, **kwargs)
    return recorder, result


def _tensors_of(inputs, kwargs):
    """The tensors among a step's arguments, in order: positional ones (inside lists and tuples
    too), then keyword ones by name. A replay copies the data of each into the tensor recorded
    at the same position."""
    found = []

    def visit(value):
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    visit(inputs)
    visit([value for _, value in sorted(kwargs.items())])
    return tuple(found)
