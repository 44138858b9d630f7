"""The order a recorded step replays in.

Edges come from the blocks each node reads and writes, in recording order (SINGA):
- read after write (RAW): a reader runs after the block's last writer;
- write after read (WAR): a writer runs after every reader of the block's previous value;
- write after write (WAW): several writers of one block keep their recorded order.
Serial order is the recording order. BFS order is Kahn's algorithm: start from the nodes
with no predecessor, and run a node once all its predecessors have run, first come first
served. The route of SuperNeurons' Algorithm 1 is the same counting with a stack instead of a
queue: depth first, except that a join waits until all its inputs are done. All are valid
topological orders, so all compute the same numbers.

Either order is then split in two phases (``replay_order``): compute (forward, loss, backward)
first, and the commit phase (the optimizer's updates, and whatever the step does after them)
last, so that a step that fails while computing has changed no parameter.
"""

from collections import deque


def dependencies(nodes, data=None):
    """predecessors[i]: the set of node indices that node i must wait for. Given a set
    `data`, the read-after-write edges are also added to it as (writer, reader) pairs: the
    edges that carry data, where the others only keep an order."""
    last_writer, readers = {}, {}
    predecessors = []
    for node in nodes:
        before = set()
        for spec in node.reads:
            key = id(spec.block)
            if key in last_writer:
                before.add(last_writer[key])  # RAW
                if data is not None and last_writer[key] != node.index:
                    data.add((last_writer[key], node.index))
        for spec in node.writes:
            key = id(spec.block)
            before.update(r for r in readers.get(key, ()) if r != node.index)  # WAR
            if key in last_writer:
                before.add(last_writer[key])  # WAW
        for spec in node.reads:
            readers.setdefault(id(spec.block), []).append(node.index)
        for spec in node.writes:
            last_writer[id(spec.block)] = node.index
            readers[id(spec.block)] = []
        before.update(node.after)  # control edges
        before.discard(node.index)
        predecessors.append(before)
    return predecessors


def serial_order(nodes):
    return list(range(len(nodes)))


def bfs_order(nodes, predecessors=None):
    """Kahn's algorithm with a FIFO queue (breadth first), ties broken by recording order."""
    return _kahn(nodes, predecessors, depth_first=False)


def route_order(nodes, predecessors=None):
    """SuperNeurons' Algorithm 1: depth first, a node runs once its counter says all its
    inputs are done (Kahn's algorithm with a LIFO stack).

    For the course only (tutorial 03 and its tests compare it with the BFS order): replay
    orders come from ``replay_order``, which never uses it."""
    return _kahn(nodes, predecessors, depth_first=True)


def _kahn(nodes, predecessors, depth_first):
    predecessors = dependencies(nodes) if predecessors is None else predecessors
    successors = [[] for _ in nodes]
    waiting = [len(p) for p in predecessors]
    for i, before in enumerate(predecessors):
        for j in before:
            successors[j].append(i)
    ready = deque(i for i, w in enumerate(waiting) if w == 0)
    if depth_first:
        ready.reverse()  # the stack's top is the first node recorded
    order = []
    while ready:
        i = ready.pop() if depth_first else ready.popleft()
        order.append(i)
        newly_ready = []
        for j in sorted(successors[i]):
            waiting[j] -= 1
            if waiting[j] == 0:
                newly_ready.append(j)
        ready.extend(reversed(newly_ready) if depth_first else newly_ready)
    if len(order) != len(nodes):
        raise RuntimeError("the recorded step has a dependency cycle; this is a bug in nnmem")
    return order


def replay_order(nodes, sequential):
    """(order, commit_start): the replay order, serial or BFS, with the commit phase moved
    after everything else; order[commit_start:] is that phase.

    The commit phase is every "update" node and every node that depends on one. Nothing
    outside it depends on a node in it, so moving it last keeps a topological order (and the
    numbers). Its cost: a gradient now lives until the end of backward even where BFS would
    have consumed it earlier."""
    predecessors = dependencies(nodes)
    order = serial_order(nodes) if sequential else bfs_order(nodes, predecessors)
    commit = set()
    for i in order:  # predecessors come first in a topological order
        if nodes[i].phase == "update" or not predecessors[i].isdisjoint(commit):
            commit.add(i)
    compute = [i for i in order if i not in commit]
    return compute + [i for i in order if i in commit], len(compute)
