"""A compiled step: a recorded training step, ordered, laid out in an arena, and replayed.

Compiling (once, right after the recording, before anything has run):
1. classify every block (input / parameter / intermediate / end, see liveness.py), and, when
   recomputation is on, drop cheap forward results and insert their rebuilding (recompute.py);
2. choose the replay order (serial or BFS, see schedule.py), the commit phase (optimizer
   updates) last;
3. give the intermediate blocks storages with live ranges in that order, merging in-place
   pairs, and lay them out: an offset for each storage (memory/layout.py);
4. place the layout in the device's graph arena (ONE pool block, shared by all the compiled
   steps of the device, see memory/arena.py) and point every intermediate block at its
   offset inside it;
5. build every node's argument arrays once.
Replaying then calls the kernel functions with their ready arrays, in order: no Python
operator code, no allocator call, no array construction. A Ctrl-C during the commit phase
waits for its end, so a replay is either wholly applied or leaves the parameters untouched.
"""

from nnmem.graph.liveness import END, INTERMEDIATE, block_kinds, storages
from nnmem.graph.recompute import add_recomputation
from nnmem.graph.schedule import dependencies, replay_order
from nnmem.memory.layout import layout
from nnmem.memory.timeline import Timeline
from nnmem.memory.units import aligned_size
from nnmem.tensor import Tensor


class CompiledStep:
    def __init__(
        self, device, recorder, inputs, result, sequential, label, recompute_strategy="none"
    ):
        self.device, self.label = device, label
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
        self.replays = 0  # since the last placement: the first one runs call by call
        self.compile(sequential)

    # -- compiling ------------------------------------------------------------------------
    def compile(self, sequential, recompute_strategy=None):
        """(Re)compile the step for serial (sequential=True) or BFS order, and a recomputation
        strategy ("none", "speed", "memory", "cost-aware"; None keeps the current one).
        All or nothing: if the new layout does not fit the pool, the step keeps its old one."""
        arena = self.device.graph_arena
        pool = self.device.pool

        def round_up(n):
            return aligned_size(n, pool.alignment)

        strategy = self.recompute_strategy if recompute_strategy is None else recompute_strategy
        nodes, recomputations = add_recomputation(
            self.recorded, self.recorded_kinds, strategy, round_up
        )
        kinds, _ = block_kinds(nodes)
        order, commit_start = replay_order(nodes, sequential)
        new_storages = storages(nodes, order, kinds, round_up=round_up, recycle=self.device.recycle)
        new_layout = layout(
            sizes=[s.nbytes for s in new_storages], ranges=[(s.first, s.last) for s in new_storages]
        )
        previous = {k: getattr(self, k, None) for k in self._COMPILED_STATE}
        arena.leave(self)
        stats = pool.stats()
        in_arena = 1 if arena.offset is not None else 0
        self.sequential, self.recompute_strategy = sequential, strategy
        self.recomputations = recomputations
        self.nodes, self.kinds, self.order = nodes, kinds, order
        self.commit_start = commit_start
        self.storages, self.layout = new_storages, new_layout
        self.persistent_bytes = stats["allocated_bytes.current"] - arena.size
        try:
            arena.join(self, self.layout.arena_bytes)
        except BaseException:  # out of memory, or anything else: the old layout, as it was
            if previous["layout"] is None:  # the first layout: nothing to go back to
                raise
            for key, value in previous.items():
                setattr(self, key, value)
            arena.join(self, self.layout.arena_bytes)
            raise
        self.timeline = self._planned_timeline(
            self.persistent_bytes, stats["active_blocks"] - in_arena
        )

    # What compile() replaces, and puts back if the new layout does not fit.
    _COMPILED_STATE = (
        "sequential",
        "recompute_strategy",
        "recomputations",
        "nodes",
        "kinds",
        "order",
        "commit_start",
        "storages",
        "layout",
        "persistent_bytes",
    )

    def place(self, base):
        """Point the intermediate blocks at their offsets in the layout, from `base` (the arena's
        offset in the pool), and build every call's arrays there."""
        for storage, offset in zip(self.storages, self.layout.offsets):
            for block in storage.blocks:
                block.offset, block.arena = base + offset, base
        self.replays = 0
        if not self.device.runs_kernels:  # a planning device has no bytes to run on
            self.calls = []
            return
        self.calls = [
            (
                self.nodes[i].name,
                self.nodes[i].fn,
                [spec.array() for spec in self.nodes[i].writes + self.nodes[i].reads],
            )
            for i in self.order
        ]

    # -- replaying -------------------------------------------------------------------------
    def replay(self, inputs, host_values=tuple):
        """Run the recorded step again on the data now in its input tensors.

        `host_values`: a function giving the Python scalars the step's kernels are launched
        with (learning rate, seed...); a device that captures the step as one launch (CUDA
        graphs) captures it again when they change. Only such a device calls it."""
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
        self._run(self.calls[: self.commit_start])
        with self.device.commit_phase():
            self._run(self.calls[self.commit_start :])
        return self.result

    def _run(self, calls):
        dev = self.device
        if dev.verbosity or dev.memory_samples is not None:
            for name, fn, arrays in calls:
                dev.run_kernel(name, fn, arrays)
        else:
            for _, fn, arrays in calls:
                fn(*arrays)

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
            f"graph ({'serial' if self.sequential else 'BFS'})", names, bytes_in_use, live
        )
