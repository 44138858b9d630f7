"""A compiled step: a recorded training step, planned, placed in an arena, and replayed.

Compiling (once, right after the recording, before anything has run):
0. fuse chains of memory-bound kernel calls into one call each (fuse.py; ``fuse=True``, the
   default): every planner then sees the fused step;
1. plan the step (plan.py): the rewriting passes (recomputation, offloading), the replay
   order, the slots of the intermediate blocks and their layout. A plan is a value: replanning
   makes a new one, and a new one that does not fit gives way to the old one;
2. place the layout in the device's graph arena (ONE pool block, shared by all the compiled
   steps of the device, see memory/arena.py) and point every intermediate block at its
   offset inside it; offloaded tensors' host copies are laid out the same way in the host
   pool's arena;
3. build every node's argument arrays once; a step that offloads hands its calls to the
   transfer engine (engine.py), which puts the copies on the copy stream and adds the waits;
   a step with concurrency control (concurrency.py) profiles every operation's thread count
   in its first replays, then runs each with its count, co-running independent ones.
Replaying then calls the kernel functions with their ready arrays, in order: no Python
operator code, no allocator call, no array construction. A Ctrl-C during the commit phase
waits for its end, so a replay is either wholly applied or leaves the parameters untouched.
What a learner reads from a step (summary, live sets, tensors, text) is in report.py.
"""

import contextlib
import functools

from nnmem.graph import draw, report
from nnmem.graph.concurrency import Concurrency
from nnmem.graph.engine import TransferEngine
from nnmem.graph.fuse import fuse
from nnmem.graph.liveness import END, block_kinds
from nnmem.graph.optimal import OptimalPlanner
from nnmem.graph.plan import PlanTooLarge, choose_offload, make_plan, pool_bytes_needed
from nnmem.graph.skipped import SkippedStep
from nnmem.memory.errors import OutOfMemory
from nnmem.tensor import Tensor


def _read_from_plan(field):
    """A read-only attribute of a CompiledStep: its plan's `field` (see plan.Plan)."""
    return property(lambda step: getattr(step.plan, field), doc=f"self.plan.{field}")


class CompiledStep:
    # The plan's fields that users, tests, the CLI and the tutorials read on a step.
    sequential = _read_from_plan("sequential")
    recycle = _read_from_plan("recycle")
    recompute_policy = _read_from_plan("recompute_policy")
    offload = _read_from_plan("offload")
    recomputations = _read_from_plan("recomputations")
    offloaded = _read_from_plan("offloaded")
    nodes = _read_from_plan("nodes")
    kinds = _read_from_plan("kinds")
    order = _read_from_plan("order")
    commit_start = _read_from_plan("commit_start")
    slots = _read_from_plan("slots")
    layout = _read_from_plan("layout")
    host_layout = _read_from_plan("host_layout")

    def __init__(self, device, recorder, inputs, result, label, options):
        """Compile the step `recorder` holds, as `options` (a checked nnmem.step_options.
        StepOptions: order, recompute and offload policies, engine, concurrency) ask.
        `inputs` are the placeholders a replay copies data into, `result` what it returns,
        `label` names the step in messages. offload="dyn" picks its policy here, for the
        device's budget (PlanTooLarge if none fits)."""
        self.device, self.label = device, label
        # concurrency control (concurrency.py): None is "off", every operation on all the cores
        concurrency = options.concurrency
        self.concurrency = None if concurrency == "off" else Concurrency(concurrency, device)
        # fusion first (fuse.py): every planner below sees the fused step
        self.recorded, self.fusions, self.unfused = recorder.nodes, [], recorder.nodes
        self._unfused_kinds = None  # block_kinds of the unfused recording, when a plan needs it
        if options.fuse:
            self.recorded, self.fusions = fuse(recorder.nodes, device.kernels)
        self.inputs = inputs
        self.result = result
        self.recorded_kinds, self.blocks = block_kinds(self.recorded)
        # Read-first blocks are held by the recorder; results are held here, so that nothing
        # the replay writes or reads can be freed under it. Results live in ordinary blocks.
        results = [b for k, b in self.blocks.items() if self.recorded_kinds[k] == END]
        for block in results:
            block.ensure_allocated()
        self.held = recorder.held + [
            Tensor._on_block(b, (b.nbytes,), "uint8", device) for b in results
        ]
        # The plan (plan.py) and what placing it measured; compile() sets them together.
        self.plan, self.persistent_bytes, self.engine = None, None, None
        self.synchronous_offload = not options.async_offload
        self.replays = 0  # since the last placement: the first one runs call by call
        self._placing = False
        self.optimal = None  # memory="optimal": what the planner decided and proved
        sequential, recompute, offload = options.sequential, options.recompute, options.offload
        if options.memory == "optimal":
            self.plan_optimal(sequential, device.pool.budget)
            return
        if offload == "dyn":
            # the device's budget now, not the options': another model's later compile on the
            # device may have changed it
            budget = device.pool.budget
            offload = self.choose_offload(sequential, recompute, budget)
            if offload is None:
                everything = self._plan(sequential, recompute, "all")
                raise PlanTooLarge(pool_bytes_needed(everything, device, joined=False), budget)
        self.replan(sequential, recompute, offload)

    # -- compiling ------------------------------------------------------------------------
    def recording(self, offload="none", optimal=False):
        """(nodes, kinds) a plan starts from: the fused step (fuse.py), or, for a plan that
        offloads or an optimal plan, the recording as the operators made it. Fusion changes
        which layer reads which tensor, and vDNN's layer-wise offloading (and the optimal
        planner's per-tensor choices) were tuned on the unfused layers: measured on ResNet-8,
        batch 8, offload="all" needed 10% more pool fused than unfused."""
        if not self.fusions or (offload == "none" and not optimal):
            return self.recorded, self.recorded_kinds
        if self._unfused_kinds is None:
            self._unfused_kinds = block_kinds(self.unfused)[0]
        return self.unfused, self._unfused_kinds

    def _plan(self, sequential, recompute, offload, decisions=None):
        return make_plan(
            *self.recording(offload, decisions is not None),
            self.device,
            sequential,
            recompute,
            offload,
            decisions,
        )

    def choose_offload(self, sequential, recompute, budget):
        """vDNN's dynamic policy for this step: the fastest offload policy whose plan fits
        `budget` bytes of pool, or None (plan.choose_offload)."""
        joined = self in self.device.graph_arena
        nodes, kinds = self.recording("dyn")
        return choose_offload(nodes, kinds, self.device, sequential, recompute, budget, joined)

    def plan_optimal(self, sequential, budget, time_limit=None):
        """Plan the step with memory="optimal": the fastest plan whose pool fits `budget`
        bytes (optimal.py), placed as replan places one; ``self.optimal`` says what was
        decided and proved. All or nothing, as replan."""
        joined = self in self.device.graph_arena
        planner = OptimalPlanner(*self.recording(optimal=True), self.device, sequential, joined)
        limit = {} if time_limit is None else {"time_limit": time_limit}
        planned, report = planner.plan(budget, **limit)
        self._place(planned)
        self.optimal = report

    def replan(self, sequential, recompute_policy=None, offload=None):
        """Plan the step again and place the new plan: serial (sequential=True) or BFS order,
        a recomputation policy ("none", "speed", "memory", "cost-aware") and an offload policy
        ("none", "conv", "all"; see offload.py); None keeps the current one (an optimal plan
        keeps its decisions when both are None).
        All or nothing: if the new layout does not fit the pool, the step keeps its old one."""
        decisions = None
        if recompute_policy is None and offload is None and self.plan is not None:
            decisions = self.plan.decisions  # an optimal plan's, or None
        recompute = self.recompute_policy if recompute_policy is None else recompute_policy
        offload = self.offload if offload is None else offload
        if decisions is None and "optimal" in (recompute, offload):
            # a policy asked of a step planned optimally: the other one is "none"
            recompute, offload = (p if p != "optimal" else "none" for p in (recompute, offload))
        self._place(self._plan(sequential, recompute, offload, decisions))
        if decisions is None:
            self.optimal = None

    def _place(self, planned):
        """Place `planned` in the arenas (see replan: all or nothing)."""
        previous = self.plan, self.persistent_bytes, self.engine  # if the new one does not fit
        arena = self.device.graph_arena
        self.leave_arenas()
        stats = self.device.pool.stats()
        in_arena = 1 if arena.offset is not None else 0
        self.plan = planned
        self.persistent_bytes = stats["allocated_bytes.current"] - arena.size
        self.engine = None
        if planned.offloaded and self.device.runs_kernels:
            self.engine = TransferEngine(self.device, self.synchronous_offload)
        try:
            self._join_arenas()
        except BaseException:  # out of memory, or anything else: the old plan, as it was
            self.leave_arenas()
            if previous[0] is None:  # the first plan: nothing to go back to
                raise
            self.plan, self.persistent_bytes, self.engine = previous
            self._join_arenas()
            raise
        self.timeline = report.planned_timeline(
            planned, self.persistent_bytes, stats["active_blocks"] - in_arena
        )

    def leave_arenas(self):
        """Take the step out of the device's and the host pool's arenas; an arena no step
        uses any more goes back to its pool."""
        self.device.graph_arena.leave(self)
        self.device.host.graph_arena.leave(self)

    def _join_arenas(self):
        """Place the step in the host pool's arena and the device's, then build its calls."""
        self._placing = True
        try:
            self.device.host.graph_arena.join(self, self.plan.host_layout.arena_bytes)
            self.device.graph_arena.join(self, self.plan.layout.arena_bytes)
        finally:
            self._placing = False
        self._build_calls()

    def place(self, base):
        """Point the intermediate blocks at their offsets in the layout, from `base` (the arena's
        offset in the pool), and build every call's arrays there."""
        _point(self.plan.slots, self.plan.layout, base)
        if not self._placing:
            self._build_calls()

    def place_host(self, base):
        """Point the host blocks (offloaded tensors' copies) at their offsets in the host
        pool's arena, from `base`, and build the calls again."""
        _point(self.plan.host_slots, self.plan.host_layout, base)
        if not self._placing:
            self._build_calls()

    def trace_transfers(self, on=True):
        """Record when every call of the next replays starts and ends (the compute and copy
        lanes of ``self.engine.lanes()``); a step that offloads nothing has no lanes."""
        if self.engine is None:
            raise ValueError(
                f"{self.label} offloads nothing: compile with offload='conv' or 'all' to see "
                "its compute and copy lanes"
            )
        self.engine.trace = on
        self._build_calls()

    def _build_calls(self):
        nodes, order = self.plan.nodes, self.plan.order
        self.replays = 0
        self.split = self.plan.commit_start
        if not self.device.runs_kernels:  # a planning device has no bytes to run on
            self.calls = []
            return

        def arrays_of(node):
            return [spec.array() for spec in node.writes + node.reads]

        if self.engine is not None:
            self.calls, self.split = self.engine.calls(
                nodes, order, self.plan.commit_start, arrays_of
            )
            return
        self.calls = [(nodes[i].name, nodes[i].fn, arrays_of(nodes[i])) for i in order]
        if self.concurrency is not None:
            self.concurrency.bind(nodes, order, self.split)

    # -- replaying -------------------------------------------------------------------------
    def replay(self, inputs, host_values=tuple):
        """Run the recorded step again on the data now in its input tensors.

        `host_values`: a function giving the Python scalars the step's kernels are launched
        with (learning rate, seed...); a device that captures the step as one launch (CUDA
        graphs) captures it again when they change. Only such a device calls it. A call of
        the compute phase may end the step before its commit (SkippedStep).
        A step planned under the other setting of the device's ``recycle`` switch (a learner
        flipped ``dev.recycle``) is planned again first (follow_recycle_switch)."""
        if self.plan.recycle != self.device.recycle:
            self.follow_recycle_switch()
        for given, recorded in zip(inputs, self.inputs):
            if given is not recorded and hasattr(given, "block"):
                given.block.check_written()
                # data enters through the recorded placeholders: a copy queued on the device
                self.device.copy_tensor(recorded, given)
        self.replays += 1
        captured = self.device.captured_replay(self, host_values)  # CUDA graphs, or None
        compute, commit = (captured.compute, captured.commit) if captured else (None, None)
        if self.concurrency is not None:
            self.concurrency.begin_step()
        try:
            (compute or self._compute_phase)()
        except SkippedStep:  # the step ends here, changing no parameter (skipped.py)
            return self.result
        with self.device.commit_phase():
            (commit or functools.partial(self._run, self.calls[self.split :], self.split))()
        if self.concurrency is not None:
            self.concurrency.end_step()
        return self.result

    def _compute_phase(self):
        """The calls before the commit; with offloading, every copy ends (and a failed one
        raises) before it returns, and the step's transfer figures go to memory_stats()."""
        if self.engine is None:
            return self._run(self.calls[: self.split])
        try:
            self.engine.begin()
            self._run(self.calls[: self.split])
            self.engine.finish()
        except BaseException:
            # copies still in flight would write bytes a retry uses: let them end first
            with contextlib.suppress(Exception):
                self.device.copy_stream.synchronize()
            raise
        self.device.set_offload_stats(self.engine.measure())

    def follow_recycle_switch(self):
        """Replan the step under the device's ``recycle`` switch as it is now: off, the
        baseline plan (every intermediate block kept until the step ends, none sharing bytes);
        on, the liveness plan again. All or nothing, as replan is: if the baseline does not fit
        the pool, OutOfMemory says so and the step keeps its plan. An arena larger than the
        plans still in it shrinks at once, so the next peak is the new plan's."""
        try:
            self.replan(self.sequential)
        except OutOfMemory as e:
            switched = "on" if self.device.recycle else "off"
            e.add_note(
                f"{self.label}: recycling was switched {switched} since the step was planned, "
                f"and its new plan does not fit the pool; set dev.recycle = "
                f"{not self.device.recycle} again, or use a larger pool"
            )
            raise
        self.device.fit_arenas()

    def _run(self, calls, start=0):
        """Run `calls` (positions start, start+1, ... of self.calls)."""
        dev = self.device
        if dev.instrumented:
            for name, fn, arrays in calls:
                dev.run_kernel(name, fn, arrays)
        elif self.concurrency is not None:
            self.concurrency.run(calls, start)
        else:
            for _, fn, arrays in calls:
                fn(*arrays)

    def concurrency_profile(self):
        """The concurrency control's profile (concurrency.py): per operation the thread counts
        tried and their seconds, the choice, and what profiling cost; None when it is off."""
        return None if self.concurrency is None else self.concurrency.profile()

    # -- what a learner looks at (report.py) -----------------------------------------------
    def conv_algorithms(self):
        """{"layer:op pass": algorithm} for every convolution pass that chose its algorithm by
        timing: what its first run chose, fixed for the replays (report.conv_algorithms)."""
        return report.conv_algorithms(self.plan)

    def memory_decisions(self):
        """Per tensor that backward reads (and per weight gradient the commit reads), what the
        optimal planner decided: a list of {"tensor", "bytes", "decision" ("keep",
        "recompute", "offload", "offload (on demand)": prefetched at the start of the layer
        that reads it, not one layer ahead), "off_device" (the replay positions of the liveness plan
        where it is then not on the device: what it frees), "seconds" (what it costs: the
        rebuild, or its two copies, before overlap)}. Only for memory="optimal"."""
        if self.optimal is None:
            raise ValueError(
                f"{self.label} was planned by the heuristics: compile with memory='optimal' "
                "and a budget to see the decisions per tensor"
            )
        return [dict(row) for row in self.optimal.rows]

    def memory_summary(self):
        """The layout's figures (report.memory_summary)."""
        return report.memory_summary(self.plan, self.persistent_bytes)

    def fusion_saving(self):
        """Bytes of graph arena the fusion pass saves: the unfused recording planned as this
        plan was (order, recycling, recompute and offload policies), less this plan's arena;
        0 when nothing fused, or when this plan starts from the unfused recording (an
        offloading or optimal plan: recording())."""
        if not self.fusions or self.offload != "none" or self.plan.decisions is not None:
            return 0
        unfused = make_plan(
            *self.recording(optimal=True),  # the unfused recording, its kinds found once
            self.device,
            self.sequential,
            self.recompute_policy,
            self.offload,
        )
        return unfused.layout.arena_bytes - self.layout.arena_bytes

    def live_sets(self):
        """Per position: (operation, in set, out set) of live intermediates (report.live_sets)."""
        return report.live_sets(self.plan)

    def live_tensors(self):
        """Every tensor of the plan, with when and where it lives, for the memory viewer
        (report.live_tensors); ``self.timeline`` is its curve."""
        return report.live_tensors(self.plan, self.persistent_bytes)

    def to_dot(self):
        """The step as Graphviz DOT text: operations coloured by the kind of block they write,
        their liveness, and their dependencies (graph/draw.py; draw.draw(step) draws the same
        graph with matplotlib)."""
        return draw.to_dot(self)

    def describe(self, limit=None):
        """The graph as text: nodes in replay order with the blocks they read and write
        (report.describe)."""
        return report.describe(self.plan, self.label, limit)


def _point(step_slots, step_layout, base):
    """Give every block of the slots its offset: `base` + its slot's place."""
    for slot, offset in zip(step_slots, step_layout.offsets):
        for block in slot.blocks:
            block.offset, block.arena_offset = base + offset, base
