"""Floating-point operations of one kernel call: what a GFLOP/s figure divides.

Counted for the convolution and matrix-product passes only, the work that is arithmetic-bound
(2 flops per multiply-add); every other kernel counts 0: it is bound by memory, and its figure
is its time. Read from the call's operation name ("layer:Op", anything after a space ignored)
and the shapes of the arrays it writes and reads. Both the profiler (profiler.py: GFLOP/s per
operation) and the optimal planner's flop model (graph/costs.py) count with this one function.
"""

import math


def kernel_flops(name, shapes):
    """Floating-point operations of a call of operation `name` on arrays of `shapes`.

    A convolution pass touches a tensor shaped like the output y (N, O, OH, OW) and one shaped
    like the filters W (O, C, KH, KW), whatever the pass (forward: y and W; backward data: dy
    and W; backward filter: dy and dW): 2 * N*O*OH*OW * C*KH*KW = 2 * |y| * |W| / O. A matrix
    product C = A B reads or writes three 2-D arrays of m*k, k*n and m*n elements, in every
    pass: 2*m*k*n = 2 * sqrt(|A| |B| |C|)."""
    op = name.split(" ")[0].split(":")[-1]
    shapes = [tuple(s) for s in shapes]
    if op == "Conv2d":
        # y and W are the pair with y[1] == W[0] (O). When the batch equals O (DenseNet's 32
        # channels at batch 32), the input x = (N, C, H, W) pairs with y too: W is then the
        # smaller of the two (C*KH*KW*O elements against N*C*H*W), so the smallest pair counts.
        four = [i for i, s in enumerate(shapes) if len(s) == 4]
        pairs = [(shapes[a], shapes[b]) for a in four for b in four if a != b]
        pairs = [(y, w) for y, w in pairs if y[1] == w[0]]
        if not pairs:
            return 0
        y, w = min(pairs, key=lambda pair: math.prod(pair[1]))
        return 2 * math.prod(y) * math.prod(w) // w[0]
    if op == "Matmul":
        two = [math.prod(s) for s in shapes if len(s) == 2][:3]
        if len(two) == 3:
            return 2 * math.sqrt(two[0] * two[1] * two[2])
    return 0
