"""SINGA's fusion of gradients into messages: a gradient larger than the threshold goes alone,
smaller ones gather until together they pass it, so that a step sends few large messages
instead of many small ones, whose latency would dominate.

Contract: Fuser hands each group to its send function as soon as the group is complete (so its
exchange starts while backward goes on); a group holds tensors of one dtype; flush() sends the
last. check_threshold refuses a threshold that is not a whole number of elements >= 0.
"""


class Fuser:
    """SINGA's grouping of tensors into messages: one larger than `threshold` elements goes
    alone; smaller ones gather (of one dtype) until together they pass it. send(list) gets
    each group as soon as it is complete; flush() sends the last."""

    def __init__(self, threshold, send):
        self.threshold, self.send, self.group = threshold, send, []

    def add(self, t):
        if t.size() > self.threshold:
            self.send([t])
            return
        if self.group and self.group[0].dtype != t.dtype:
            self.flush()
        self.group.append(t)
        if sum(g.size() for g in self.group) > self.threshold:
            self.flush()

    def flush(self):
        if self.group:
            self.send(self.group)
            self.group = []


def check_threshold(threshold):
    if not (isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0):
        raise ValueError(
            f"DistOpt: threshold must be a whole number of elements >= 0, got {threshold!r}"
        )
