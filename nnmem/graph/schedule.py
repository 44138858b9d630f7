"""The order a recorded step replays in.

Edges come from the blocks each node reads and writes, in recording order (SINGA):
- read after write (RAW): a reader runs after the block's last writer;
- write after read (WAR): a writer runs after every reader of the block's previous value;
- write after write (WAW): several writers of one block keep their recorded order.
Serial order is the recording order. BFS order is Kahn's algorithm: start from the nodes
with no predecessor, and run a node once all its predecessors have run, first come first
served. Both are valid topological orders, so both compute the same numbers.
"""
from collections import deque


def dependencies(nodes):
    """predecessors[i]: the set of node indices that node i must wait for."""
    last_writer, readers = {}, {}
    predecessors = []
    for node in nodes:
        before = set()
        for spec in node.reads:
            key = id(spec.block)
            if key in last_writer:
                before.add(last_writer[key])                        # RAW
        for spec in node.writes:
            key = id(spec.block)
            before.update(r for r in readers.get(key, ()) if r != node.index)   # WAR
            if key in last_writer:
                before.add(last_writer[key])                        # WAW
        for spec in node.reads:
            readers.setdefault(id(spec.block), []).append(node.index)
        for spec in node.writes:
            last_writer[id(spec.block)] = node.index
            readers[id(spec.block)] = []
        before.update(node.after)                                   # control edges
        before.discard(node.index)
        predecessors.append(before)
    return predecessors


def serial_order(nodes):
    return list(range(len(nodes)))


def bfs_order(nodes, predecessors=None):
    """Kahn's algorithm with a FIFO queue (breadth first), ties broken by recording order."""
    predecessors = dependencies(nodes) if predecessors is None else predecessors
    successors = [[] for _ in nodes]
    waiting = [len(p) for p in predecessors]
    for i, before in enumerate(predecessors):
        for j in before:
            successors[j].append(i)
    ready = deque(i for i, w in enumerate(waiting) if w == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for j in sorted(successors[i]):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if len(order) != len(nodes):
        raise RuntimeError("the recorded step has a dependency cycle; this is a bug in nnmem")
    return order


def replay_order(nodes, sequential):
    return serial_order(nodes) if sequential else bfs_order(nodes)
