"""A compiled step: a recorded training step, ordered, laid out in an arena, and replayed.

Compiling (once, right after the recording, before anything has run):
1. classify every block (input / parameter / intermediate / end, see liveness.py), and run
   the rewriting passes (``passes``), which add nodes and point readers at new blocks:
   recomputation drops cheap forward results and rebuilds them in backward (recompute.py),
   then offloading copies activations out to host memory after forward made them and
   prefetches them for backward (offload.py; the shared machinery is rewrite.py);
2. choose the replay order (serial or BFS, see schedule.py), the commit phase (optimizer
   updates) last;
3. give the intermediate blocks storages with live ranges in that order, merging in-place
   pairs, and lay them out: an offset for each storage (memory/layout.py);
4. place the layout in the device's graph arena (ONE pool block, shared by all the compiled
   steps of the device, see memory/arena.py) and point every intermediate block at its
   offset inside it; offloaded tensors' host copies are laid out the same way in the host
   pool's arena;
5. build every node's argument arrays once; a step that offloads hands its calls to the
   transfer engine (engine.py), which puts the copies on the copy stream and adds the waits;
   a step with concurrency control (concurrency.py) profiles every operation's thread count
   in its first replays, then runs each with its count, co-running independent ones.
Replaying then calls the kernel functions with their ready arrays, in order: no Python
operator code, no allocator call, no array construction. A Ctrl-C during the commit phase
waits for its end, so a replay is either wholly applied or leaves the parameters untouched.
"""

import contextlib

from nnmem.graph import draw
from nnmem.graph.concurrency import Concurrency
from nnmem.graph.engine import TransferEngine
from nnmem.graph.liveness import (
    END,
    HOST,
    INPUT,
    INTERMEDIATE,
    PARAMETER,
    block_kinds,
    storages,
)
from nnmem.graph.offload import add_offload
from nnmem.graph.recompute import add_recomputation
from nnmem.graph.schedule import dependencies, replay_order
from nnmem.memory.layout import layout
from nnmem.memory.timeline import Timeline
from nnmem.memory.units import aligned_size, format_bytes
from nnmem.tensor import Tensor


class PlanTooLarge(MemoryError):
    """offload="dyn": no policy fits the budget (`needed` bytes with offload="all")."""

    def __init__(self, needed, budget):
        self.needed, self.budget = needed, budget
        super().__init__(
            f"offload='dyn': even offloading every activation, this step needs "
            f"{format_bytes(needed)} of pool, over the budget of {format_bytes(budget)}"
        )


class CompiledStep:
    def __init__(
        self,
        device,
        recorder,
        inputs,
        result,
        sequential,
        label,
        recompute_strategy="none",
        offload="none",
        synchronous_offload=False,
        concurrency="off",
    ):
        self.device, self.label = device, label
        # concurrency control (concurrency.py): None is "off", every operation on all the cores
        self.concurrency = None if concurrency == "off" else Concurrency(concurrency, device)
        self.recorded = recorder.nodes
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
        self.storages, self.layout = [], None
        self.recompute_strategy = recompute_strategy
        self.offload = offload
        self.synchronous_offload = synchronous_offload
        self.engine = None
        self.replays = 0  # since the last placement: the first one runs call by call
        self._placing = False
        if offload == "dyn":
            budget = device.pool.budget
            self.offload = self.choose_offload(sequential, recompute_strategy, budget)
            if self.offload is None:
                needed = self.pool_bytes_needed(self.plan(sequential, recompute_strategy, "all"))
                raise PlanTooLarge(needed, budget)
        self.compile(sequential)

    # -- compiling ------------------------------------------------------------------------
    def passes(self, strategy, offload, round_up):
        """The rewriting passes, in order: (name, function from nodes to (nodes, count))."""
        return (
            (
                "recompute",
                lambda nodes: add_recomputation(nodes, self.recorded_kinds, strategy, round_up),
            ),
            (
                "offload",
                lambda nodes: add_offload(nodes, block_kinds(nodes)[0], offload, self.device.host),
            ),
        )

    def plan(self, sequential, strategy, offload):
        """The passes, the order, the storages and the layouts of a compilation, as a dict of
        the attributes compile() sets; nothing is placed or allocated.

        "cost-aware" recomputation is kept only where it does not raise the peak: it frees a
        tensor by keeping what rebuilds it, and where the peak sits elsewhere (in the commit
        phase, or on tensors offloading already moved) that trade only adds bytes and work;
        the plan then has no recomputation. "speed" and "memory" are applied as asked."""
        planned = self._plan(sequential, strategy, offload)
        if strategy == "cost-aware" and planned["recomputations"]:
            without = self._plan(sequential, "none", offload)
            if without["layout"].arena_bytes < planned["layout"].arena_bytes:
                return dict(without, recompute_strategy=strategy)
        return planned

    def _plan(self, sequential, strategy, offload):
        pool = self.device.pool

        def round_up(n):
            return aligned_size(n, pool.alignment)

        nodes, counts = self.recorded, {}
        for name, run in self.passes(strategy, offload, round_up):
            nodes, counts[name] = run(nodes)
        kinds, _ = block_kinds(nodes)
        order, commit_start = replay_order(nodes, sequential)
        new_storages = storages(nodes, order, kinds, round_up=round_up, recycle=self.device.recycle)
        host_kinds = {k: INTERMEDIATE if v == HOST else v + " (device)" for k, v in kinds.items()}
        host_storages = storages(nodes, order, host_kinds, round_up=round_up, inplace=False)
        return {
            "sequential": sequential,
            "recompute_strategy": strategy,
            "offload": offload,
            "recomputations": counts["recompute"],
            "offloaded": counts["offload"],
            "nodes": nodes,
            "kinds": kinds,
            "order": order,
            "commit_start": commit_start,
            "storages": new_storages,
            "layout": _layout_of(new_storages),
            "host_storages": host_storages,
            "host_layout": _layout_of(host_storages),
        }

    def pool_bytes_needed(self, planned):
        """The pool's allocated bytes once a `plan()` is placed: what is allocated now, with
        the graph arena grown to hold it (the arena is shared: it only ever grows)."""
        arena = self.device.graph_arena
        others = 0 if self in arena else arena.size  # my own old layout does not count
        allocated = self.device.pool.stats()["allocated_bytes.current"]
        return allocated - arena.size + max(others, planned["layout"].arena_bytes)

    def choose_offload(self, sequential, strategy, budget):
        """vDNN's dynamic policy: the first of "none", "conv", "all" (fastest first: the fewer
        copies, the fewer stalls) whose plan fits `budget` bytes of pool; None if none fits."""
        for policy in ("none", "conv", "all"):
            if self.pool_bytes_needed(self.plan(sequential, strategy, policy)) <= budget:
                return policy
        return None

    def compile(self, sequential, recompute_strategy=None, offload=None):
        """(Re)compile the step for serial (sequential=True) or BFS order, a recomputation
        strategy ("none", "speed", "memory", "cost-aware") and an offload policy ("none",
        "conv", "all"; see offload.py); None keeps the current one.
        All or nothing: if the new layout does not fit the pool, the step keeps its old one."""
        strategy = self.recompute_strategy if recompute_strategy is None else recompute_strategy
        planned = self.plan(sequential, strategy, self.offload if offload is None else offload)
        previous = {k: getattr(self, k, None) for k in self._COMPILED_STATE}
        arena = self.device.graph_arena
        self.leave_arenas()
        stats = self.device.pool.stats()
        in_arena = 1 if arena.offset is not None else 0
        for key, value in planned.items():
            setattr(self, key, value)
        self.persistent_bytes = stats["allocated_bytes.current"] - arena.size
        self.engine = None
        if self.offloaded and self.device.runs_kernels:
            self.engine = TransferEngine(self.device, self.synchronous_offload)
        try:
            self._join_arenas()
        except BaseException:  # out of memory, or anything else: the old layout, as it was
            self.leave_arenas()
            if previous["layout"] is None:  # the first layout: nothing to go back to
                raise
            for key, value in previous.items():
                setattr(self, key, value)
            self._join_arenas()
            raise
        self.timeline = self._planned_timeline(
            self.persistent_bytes, stats["active_blocks"] - in_arena
        )

    # What compile() replaces, and puts back if the new layout does not fit.
    _COMPILED_STATE = (
        "sequential",
        "recompute_strategy",
        "offload",
        "recomputations",
        "offloaded",
        "nodes",
        "kinds",
        "order",
        "commit_start",
        "storages",
        "layout",
        "host_storages",
        "host_layout",
        "persistent_bytes",
        "engine",
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
            self.device.host.graph_arena.join(self, self.host_layout.arena_bytes)
            self.device.graph_arena.join(self, self.layout.arena_bytes)
        finally:
            self._placing = False
        self._build_calls()

    def place(self, base):
        """Point the intermediate blocks at their offsets in the layout, from `base` (the arena's
        offset in the pool), and build every call's arrays there."""
        _point(self.storages, self.layout, base)
        if not self._placing:
            self._build_calls()

    def place_host(self, base):
        """Point the host blocks (offloaded tensors' copies) at their offsets in the host
        pool's arena, from `base`, and build the calls again."""
        _point(self.host_storages, self.host_layout, base)
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
        self.replays = 0
        self.split = self.commit_start
        if not self.device.runs_kernels:  # a planning device has no bytes to run on
            self.calls = []
            return

        def arrays_of(node):
            return [spec.array() for spec in node.writes + node.reads]

        if self.engine is not None:
            self.calls, self.split = self.engine.calls(
                self.nodes, self.order, self.commit_start, arrays_of
            )
            return
        self.calls = [
            (self.nodes[i].name, self.nodes[i].fn, arrays_of(self.nodes[i])) for i in self.order
        ]
        if self.concurrency is not None:
            self.concurrency.bind(self.nodes, self.order, self.split)

    # -- replaying -------------------------------------------------------------------------
    def replay(self, inputs, host_values=tuple):
        """Run the recorded step again on the data now in its input tensors.

        `host_values`: a function giving the Python scalars the step's kernels are launched
        with (learning rate, seed...); a device that captures the step as one launch (CUDA
        graphs) captures it again when they change. Only such a device calls it.
        With offloading, every copy has finished (and a failed one has raised) before the
        commit phase begins; the step's transfer figures are then in memory_stats()."""
        for given, recorded in zip(inputs, self.inputs):
            if given is not recorded and hasattr(given, "block"):
                given.block.check_written()
                # data enters through the recorded placeholders: a copy queued on the device
                self.device.copy_tensor(recorded, given)
        self.replays += 1
        launch = self.device.captured_launch(self, host_values)
        if launch is not None:  # the whole step as one launch: compute and commit together
            with self.device.commit_phase():
                launch()
            return self.result
        if self.concurrency is not None:
            self.concurrency.begin_step()
        if self.engine is None:
            self._run(self.calls[: self.split])
        else:
            try:
                self.engine.begin()
                self._run(self.calls[: self.split])
                self.engine.finish()
            except BaseException:
                # copies still in flight would write bytes a retry uses: let them end first
                with contextlib.suppress(Exception):
                    self.device.copy_stream.synchronize()
                raise
            self.device.offload_stats = self.engine.measure()
        with self.device.commit_phase():
            self._run(self.calls[self.split :], self.split)
        if self.concurrency is not None:
            self.concurrency.end_step()
        return self.result

    def _run(self, calls, start=0):
        """Run `calls` (positions start, start+1, ... of self.calls)."""
        dev = self.device
        if dev.verbosity or dev.memory_samples is not None:
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

    # -- what a learner looks at -----------------------------------------------------------
    def conv_algorithms(self):
        """{"layer:op pass": algorithm} for every convolution pass that chose its algorithm by
        timing (Conv2d's "auto", with a workspace that fits): what its first run chose, fixed
        for the replays."""
        chosen = {}
        for i in self.order:
            node = self.nodes[i]
            pass_name, algorithm = getattr(node.fn, "conv_algorithm", (None, None))
            if pass_name is not None:
                chosen[f"{node.name} {pass_name}"] = algorithm()
        return chosen

    def memory_summary(self):
        """The layout's figures: lower bound and arena (of the intermediate blocks), the bytes
        that stay allocated outside the arena (parameters, optimizer state, inputs, results,
        and anything else in the pool), blocks, storages, in-place merges."""
        intermediates = sum(1 for k in self.kinds.values() if k == INTERMEDIATE)
        return {
            "nodes": len(self.nodes),
            "order": "serial" if self.sequential else "bfs",
            "recompute_strategy": self.recompute_strategy,
            "recomputations": self.recomputations,
            "offload": self.offload,
            "offloaded_tensors": self.offloaded,
            "host_arena_bytes": self.host_layout.arena_bytes,
            "intermediate_blocks": intermediates,
            "storages": len(self.storages),
            "inplace_merges": intermediates - len(self.storages),
            "lower_bound_bytes": self.layout.lower_bound,
            "persistent_bytes": self.persistent_bytes,
            "arena_bytes": self.layout.arena_bytes,
            "arena_over_lower_bound": self.layout.arena_bytes / max(self.layout.lower_bound, 1),
        }

    def live_sets(self):
        """Per step of the replay order: (operation, in set, out set), the descriptions of the
        intermediate tensors live before and after it (SuperNeurons' liveness sets). A tensor
        leaves the out set of its last use."""
        live_from, live_until = {}, {}
        for storage in self.storages:
            for block, (first, last) in zip(storage.blocks, storage.ranges):
                live_from.setdefault(first, []).append(block.desc)
                live_until.setdefault(last, []).append(block.desc)
        steps, live = [], set()
        for position, i in enumerate(self.order):
            before = frozenset(live)
            live |= set(live_from.get(position, ()))
            live -= set(live_until.get(position, ()))
            steps.append((self.nodes[i].name, before, frozenset(live)))
        return steps

    def live_tensors(self):
        """Every tensor of the plan, with when and where it lives: what the memory viewer
        (memory/viewer.py) shows at each operation. Plain data, ready for JSON:

        - "tensors": one row per intermediate block, [name, shape, bytes, storage, first,
          last, flags]: its description, its shape as the first kernel that touches it sees it,
          its own bytes, the index of its storage, its live range (positions in the replay
          order: the operation that makes it and the last one that uses it), and flags among
          "in place" (it took over the storage of the tensor before it), "offloaded" (copied
          out to host memory), "prefetched" (that copy brought back for backward),
          "recomputed" (rebuilt in backward);
        - "storages": one row per storage, [bytes, offset, first, last]: the bytes the plan
          reserves (rounded up to the pool's alignment; in-place tensors share them) at this
          offset in the arena, over the union of its tensors' ranges;
        - "persistent": the blocks outside the arena, [name, shape, bytes, kind] (parameters
          and optimizer state, inputs, results), and "persistent_bytes", all of the pool
          outside the arena (those blocks, rounded up, and anything else allocated);
        - "host": the offloaded tensors' copies in the host pool, [name, bytes, first, last],
          and "host_bytes", the host pool's arena for them;
        - "phases": per position, its node's phase ("forward", "backward", "recompute",
          "update");
        - "arena_bytes", "lower_bound_bytes": the layout's figures.

        At position p the curve of ``self.timeline`` is persistent_bytes + the bytes of the
        storages with first <= p <= last, and the tensors live there are the rows with
        first <= p <= last."""
        shapes, flags, blocks = self._views()
        tensors = []
        for index, storage in enumerate(self.storages):
            for k, (block, (first, last)) in enumerate(zip(storage.blocks, storage.ranges)):
                marks = (["in place"] if k else []) + flags.get(id(block), [])
                tensors.append(
                    [block.desc, shapes[id(block)], block.nbytes, index, first, last, marks]
                )
        storages = [
            [s.nbytes, offset, s.first, s.last]
            for s, offset in zip(self.storages, self.layout.offsets)
        ]
        kept = (PARAMETER, INPUT, END)
        persistent = [
            [block.desc, shapes[key], block.nbytes, self.kinds[key]]
            for key, block in blocks.items()
            if self.kinds[key] in kept
        ]
        host = [
            [block.desc, block.nbytes, first, last]
            for s in self.host_storages
            for block, (first, last) in zip(s.blocks, s.ranges)
        ]
        return {
            "tensors": tensors,
            "storages": storages,
            "persistent": persistent,
            "persistent_bytes": self.persistent_bytes,
            "host": host,
            "host_bytes": self.host_layout.arena_bytes,
            "phases": [self.nodes[i].phase for i in self.order],
            "arena_bytes": self.layout.arena_bytes,
            "lower_bound_bytes": self.layout.lower_bound,
        }

    def _views(self):
        """({block id: shape}, {block id: flags}, {block id: block}) over the replay order: the
        shape the first kernel touching a block sees (a transfer sees only bytes), and which
        blocks a copy-out reads, a prefetch writes, a recomputation writes."""
        kernel_shapes, any_shapes, flags, blocks = {}, {}, {}, {}
        for i in self.order:
            node = self.nodes[i]
            for spec in node.writes + node.reads:
                key = id(spec.block)
                blocks.setdefault(key, spec.block)
                any_shapes.setdefault(key, list(spec.shape))
                if node.stream == "compute":
                    kernel_shapes.setdefault(key, list(spec.shape))
            if node.stream == "copy":
                out = node.fn.direction == "out"
                block = node.reads[0].block if out else node.writes[0].block
                flags.setdefault(id(block), []).append("offloaded" if out else "prefetched")
            elif node.phase == "recompute":
                for spec in node.writes:
                    flags.setdefault(id(spec.block), []).append("recomputed")
        return {**any_shapes, **kernel_shapes}, flags, blocks

    def to_dot(self):
        """The step as Graphviz DOT text: operations coloured by the kind of block they write,
        their liveness, and their dependencies (graph/draw.py; draw.draw(step) draws the same
        graph with matplotlib)."""
        return draw.to_dot(self)

    def describe(self, limit=None):
        """The graph as text: nodes in replay order with the blocks they read and write."""
        names, edges = {}, sum(len(p) for p in dependencies(self.nodes))

        def short(spec):
            key = id(spec.block)
            names.setdefault(key, f"b{len(names)}")
            return f"{names[key]}:{self.kinds[key][:5]}"

        lines = [
            f"graph of {self.label}: {len(self.nodes)} nodes, {edges} edges, "
            f"{'serial' if self.sequential else 'BFS'} order"
        ]
        for position, i in enumerate(self.order[:limit]):
            node = self.nodes[i]
            reads = " ".join(short(s) for s in node.reads)
            writes = " ".join(short(s) for s in node.writes)
            lines.append(f"{position:4d}  {node.name[:34]:34} reads {reads:32} writes {writes}")
        if limit is not None and len(self.order) > limit:
            lines.append(f"  ... {len(self.order) - limit} more")
        return "\n".join(lines)

    def _planned_timeline(self, persistent_bytes, persistent_blocks):
        """Bytes and live tensors at each position: persistent + the storages live there."""
        n = len(self.order)
        delta_bytes, delta_live = [0] * (n + 1), [0] * (n + 1)
        for s in self.storages:
            delta_bytes[s.first] += s.nbytes
            delta_bytes[s.last + 1] -= s.nbytes
            for first, last in s.ranges:
                delta_live[first] += 1
                delta_live[last + 1] -= 1
        bytes_in_use, live, b, c = [], [], persistent_bytes, persistent_blocks
        for position in range(n):
            b += delta_bytes[position]
            c += delta_live[position]
            bytes_in_use.append(b)
            live.append(c)
        names = [self.nodes[i].name for i in self.order]
        return Timeline(
            f"graph ({'serial' if self.sequential else 'BFS'})",
            names,
            bytes_in_use,
            live,
            pool_peak=persistent_bytes + self.layout.arena_bytes,
        )


def _layout_of(step_storages):
    return layout(
        sizes=[s.nbytes for s in step_storages], ranges=[(s.first, s.last) for s in step_storages]
    )


def _point(step_storages, step_layout, base):
    """Give every block of the storages its offset: `base` + its storage's place."""
    for storage, offset in zip(step_storages, step_layout.offsets):
        for block in storage.blocks:
            block.offset, block.arena = base + offset, base
