"""Fused kernels: one pass over memory where graph mode's fusion pass (nnmem/graph/fuse.py)
finds a chain of two or three memory-bound kernels.

Each kernel here computes what a chain computes, run one kernel after the other:

    batchnorm2d_relu_forward_train      batchnorm2d_forward_train; relu_forward
    batchnorm2d_relu_forward_apply      batchnorm2d_forward_apply; relu_forward
    batchnorm2d_relu_backward           relu_backward; batchnorm2d_backward
    batchnorm2d_add_relu_forward_train  batchnorm2d_forward_train; add (y + r); relu_forward
    batchnorm2d_add_relu_forward_apply  batchnorm2d_forward_apply; add (y + r); relu_forward
    batchnorm2d_add_relu_backward       relu_backward (ds, written); batchnorm2d_backward
    add_bias_relu_nchw                  add_bias_nchw; relu_forward (in place)
    relu_backward_bias_grad_nchw        relu_backward; bias_grad_nchw
    add_bias_rows_relu                  copy; add_bias_rows; relu_forward
    relu_backward_sum_rows              relu_backward; sum_rows

The bits contract: every output (and the saved and running statistics) is bit for bit the
chain's, on any number of threads. Each value is formed by the same expression, rounded to the
array's dtype at the same point (a BN output is stored, read back and then clipped, as the chain
stores y and its ReLU reads it), and every sum is taken in the same order with the same float64
accumulators: the statistics and the gradient sums by batchnorm.py's own channel sums (on
dy masked by the kernel itself, channel by channel), the bias gradients by the same single
chain as reduce.py's. ReLU is ``0 if v < 0 else v`` (NaN passes, -0.0 stays), its
gradient ``dy if y > 0 else 0``. Arrays are C-contiguous, of one dtype (the planner's are).

Why it is faster: each kernel of a chain makes a pass over the whole tensor, through memory,
and the chain writes its intermediate tensors (y, s, dy) only for the next kernel to read them
back. Fused, the ReLU and the add happen while the values are in a register or in the L1
cache, and BatchNorm's passes run channel by channel, so that a channel's second pass reads
from the cache:

    BatchNorm2d + ReLU, forward     reads x twice (statistics) and once more, writes z: no y
    BatchNorm2d + ReLU, backward    per channel: the mask writes dy, the sums and dx read
                                    it back from the cache; no pass of its own for the ReLU
    bias + ReLU, forward            one read and one write of y instead of two each
    ReLU backward + bias_grad_nchw  dy written but not read back: the sum takes each value
                                    as it is made
    ReLU backward + sum_rows        one call, but the same two passes (its docstring says why)

Memory: nothing allocated, no workspace; and the graph no longer holds the intermediates (y,
s; dy for BN + ReLU), which the fusion pass removes from the plan.
"""

from numba import prange

from ._jit import by_size, njit
from .batchnorm import channel_gradient_sums, check_bn, planes, statistics
from .elementwise import same_buffer
from .reduce import sum_rows


def _mask_channel(dy3, dz3, z3, ci):
    """dy[:, ci] = (dz where z > 0, else 0): relu_backward's expression, plane by plane; dy
    may be dz (each value is read before it is written). Both loads come before the test and
    the zero is of dz's dtype, so the test is a select, not a branch (a branch on a random
    mask mispredicts every other value: 3 times slower)."""
    zero = dz3.dtype.type(0)
    for b in range(dz3.shape[0]):
        dyp, dzp, zp = dy3[b, ci], dz3[b, ci], z3[b, ci]
        for v in range(dzp.shape[0]):
            d, t = dzp[v], zp[v]
            dyp[v] = d if t > 0 else zero


mask_channel = njit(inline="always", cache=True)(_mask_channel)


def _normalise_channel(z3, x3, r3, ci, mean, scale, shift, residual):
    """z[:, ci] = relu(((x - mean) * scale + shift) [+ r]) over (N, C, H*W) views, each value
    stored in z's dtype before the add and before the clip, as the chain stores y and s.
    Plane by plane, three loops over values in the L1 cache: each one vectorises (one loop
    doing all three, its stores and loads of z interleaved, did not, and was slower than
    the chain)."""
    for b in range(x3.shape[0]):
        zp, xp, rp = z3[b, ci], x3[b, ci], r3[b, ci]
        for v in range(zp.shape[0]):
            zp[v] = (xp[v] - mean) * scale + shift
        if residual:
            for v in range(zp.shape[0]):
                zp[v] = zp[v] + rp[v]
        for v in range(zp.shape[0]):
            t = zp[v]
            zp[v] = 0 if t < 0 else t


normalise_channel = njit(inline="always", cache=True)(_normalise_channel)


def _update_running(running_mean, running_var, ci, mean, var, m, momentum):
    unbiased = var * m / (m - 1) if m > 1 else var
    running_mean[ci] = momentum * running_mean[ci] + (1.0 - momentum) * mean
    running_var[ci] = momentum * running_var[ci] + (1.0 - momentum) * unbiased


update_running = njit(inline="always", cache=True)(_update_running)


def _check_train(z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta):
    check_bn(z, x, gamma)
    check_bn(z, x, beta)
    check_bn(z, x, saved_mean)
    check_bn(z, x, saved_invstd)
    check_bn(z, x, running_mean)
    check_bn(z, x, running_var)


check_train = njit(cache=True)(_check_train)


def _batchnorm2d_relu_forward_train(
    z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta, momentum, eps
):
    """z = relu(batchnorm(x)) with batch statistics; writes z, saved_*; updates running_*."""
    check_train(z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta)
    n, c, h, w = x.shape
    m = n * h * w
    z3, x3 = planes(z), planes(x)
    for ci in prange(c):
        mean, invstd, var = statistics(x3, ci, m, eps)
        normalise_channel(z3, x3, x3, ci, mean, gamma[ci] * invstd, beta[ci], False)
        saved_mean[ci] = mean
        saved_invstd[ci] = invstd
        update_running(running_mean, running_var, ci, mean, var, m, momentum)


def _batchnorm2d_add_relu_forward_train(
    z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta, r, momentum, eps
):
    """z = relu(batchnorm(x) + r), a residual join; writes z, saved_*; updates running_*.
    z must not be r: a plane of z is written before the add reads r's."""
    check_train(z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta)
    check_bn(r, x, gamma)
    n, c, h, w = x.shape
    m = n * h * w
    z3, x3, r3 = planes(z), planes(x), planes(r)
    for ci in prange(c):
        mean, invstd, var = statistics(x3, ci, m, eps)
        normalise_channel(z3, x3, r3, ci, mean, gamma[ci] * invstd, beta[ci], True)
        saved_mean[ci] = mean
        saved_invstd[ci] = invstd
        update_running(running_mean, running_var, ci, mean, var, m, momentum)


def _batchnorm2d_relu_forward_apply(z, x, gamma, beta, saved_mean, saved_invstd):
    """z = relu(batchnorm(x)) with saved statistics (recomputation's rebuild)."""
    check_bn(z, x, gamma)
    z3, x3 = planes(z), planes(x)
    for ci in prange(x.shape[1]):
        scale = gamma[ci] * saved_invstd[ci]
        normalise_channel(z3, x3, x3, ci, saved_mean[ci], scale, beta[ci], False)


def _batchnorm2d_add_relu_forward_apply(z, x, gamma, beta, r, saved_mean, saved_invstd):
    """z = relu(batchnorm(x) + r) with saved statistics (recomputation's rebuild); z is not r."""
    check_bn(z, x, gamma)
    check_bn(r, x, gamma)
    z3, x3, r3 = planes(z), planes(x), planes(r)
    for ci in prange(x.shape[1]):
        scale = gamma[ci] * saved_invstd[ci]
        normalise_channel(z3, x3, r3, ci, saved_mean[ci], scale, beta[ci], True)


def _backward(dx, dgamma, dbeta, ds, dz, z, x, gamma, saved_mean, saved_invstd, write_ds):
    """dy = (dz where z > 0, else 0), then batchnorm2d_backward's dx, dgamma, dbeta from dy.

    Channel by channel, where the chain makes three passes over the whole tensor: the mask
    reads dz and z and stores dy, the sums read dy and x, from the cache, and the last loop
    reads them again and writes dx; the sums are batchnorm.channel_gradient_sums itself, so
    the bits are the chain's. dy goes to
    ds when `write_ds` (ds may be dz: each value of dz is read before it is overwritten),
    else to dx, which the last loop overwrites in place (dx = k * (m * dy - ...))."""
    check_bn(dx, x, gamma)
    check_bn(dz, x, gamma)
    check_bn(z, x, gamma)
    check_bn(dz, x, dgamma)
    check_bn(dz, x, dbeta)
    check_bn(dz, x, saved_mean)
    check_bn(dz, x, saved_invstd)
    if write_ds:
        check_bn(ds, x, gamma)
    dy = ds if write_ds else dx
    n, c, h, w = x.shape
    m = n * h * w
    dx3, dy3, dz3, z3, x3 = planes(dx), planes(dy), planes(dz), planes(z), planes(x)
    for ci in prange(c):
        mean = saved_mean[ci]
        invstd = saved_invstd[ci]
        mask_channel(dy3, dz3, z3, ci)
        sdy, sdyx = channel_gradient_sums(dy3, x3, ci, mean, invstd)
        dbeta[ci] = sdy
        dgamma[ci] = sdyx
        k = gamma[ci] * invstd / m
        for b in range(n):
            dxp, xp = dx3[b, ci], x3[b, ci]
            # Two copies of one loop: where dy is dx, the loop must read dx itself. Read
            # through the name dy, the compiler cannot see that the two are one array, so
            # it checks whether they overlap, finds that they do, and runs without vectors.
            if write_ds:
                dyp = dy3[b, ci]
                for v in range(dxp.shape[0]):
                    xhat = (xp[v] - mean) * invstd
                    dxp[v] = k * (m * dyp[v] - sdy - xhat * sdyx)
            else:
                for v in range(dxp.shape[0]):
                    xhat = (xp[v] - mean) * invstd
                    dxp[v] = k * (m * dxp[v] - sdy - xhat * sdyx)


backward = njit(parallel=True, cache=True)(_backward)


def batchnorm2d_relu_backward(dx, dgamma, dbeta, dz, z, x, gamma, saved_mean, saved_invstd):
    """The gradient of relu(batchnorm(x)) from dz and z = its output: dx, dgamma, dbeta, the
    gradient of the BN's output never written. Overwrites dx, dgamma, dbeta."""
    backward(dx, dgamma, dbeta, dz, dz, z, x, gamma, saved_mean, saved_invstd, False)


def batchnorm2d_add_relu_backward(dx, dgamma, dbeta, ds, dz, z, x, gamma, saved_mean, saved_invstd):
    """The gradient of relu(batchnorm(x) + r): ds (the gradient of the sum, which r's branch
    reads too; may be dz itself), then dx, dgamma, dbeta. Overwrites all four."""
    backward(dx, dgamma, dbeta, ds, dz, z, x, gamma, saved_mean, saved_invstd, True)


def _add_bias_relu_nchw(y, b):
    """y[n, c] = relu(y[n, c] + b[c]) in place (y (N, C, H, W), b (C,)), plane by plane."""
    nb, nc, nh, nw = y.shape
    if nc != b.shape[0]:
        raise ValueError("add_bias_relu_nchw: y.shape[1] must equal b.shape[0]")
    y3 = planes(y)
    for t in prange(nb * nc):
        bc = b[t % nc]
        yp = y3[t // nc, t % nc]
        for v in range(yp.shape[0]):
            s = yp[v] + bc
            yp[v] = 0 if s < 0 else s


def _relu_backward_bias_grad_nchw(dy, db, dz, z):
    """dy = (dz where z > 0, else 0) and db[c] = sum_{n,h,w} dy[n, c], in bias_grad_nchw's
    order (one float64 chain, n, h, w in order), in one pass. dy may be dz. Overwrites dy
    and db. The chain of additions sets the pace (each waits for the one before); the mask
    runs beside it, where the chain needs a pass of its own."""
    n, c, h, w = dz.shape
    if dy.shape != dz.shape or z.shape != dz.shape or db.shape[0] != c:
        raise ValueError(
            "relu_backward_bias_grad_nchw: dy, dz, z must share one (N, C, H, W) shape, db (C,)"
        )
    zero = dz.dtype.type(0)  # a select, not a branch (_mask_channel says why)
    dy3, dz3, z3 = planes(dy), planes(dz), planes(z)
    for ci in prange(c):
        s = 0.0
        for b in range(n):
            dyp, dzp, zp = dy3[b, ci], dz3[b, ci], z3[b, ci]
            for v in range(dyp.shape[0]):
                d, t = dzp[v], zp[v]
                a = d if t > 0 else zero
                dyp[v] = a
                s += a
        db[ci] = s


def _add_bias_rows_relu(z, x, b):
    """z[n, f] = relu(x[n, f] + b[f]) (z may be x)."""
    if x.shape[1] != b.shape[0] or z.shape != x.shape:
        raise ValueError("add_bias_rows_relu: z and x must be (N, F), b (F,)")
    nrow, ncol = x.shape
    inplace = same_buffer(z, x)
    for n in prange(nrow):
        zr, xr = z[n], x[n]
        if inplace:  # a loop over z alone: it vectorises (elementwise.py says why)
            for f in range(ncol):
                s = zr[f] + b[f]
                zr[f] = 0 if s < 0 else s
        else:
            for f in range(ncol):
                s = xr[f] + b[f]
                zr[f] = 0 if s < 0 else s


def _relu_backward_sum_rows(dy, db, dz, z):
    """dy = (dz where z > 0, else 0), then db[f] = sum_n dy[n, f] by sum_rows itself (dy may
    be dz). Overwrites dy and db. One call instead of two, not one pass: sum_rows walks down
    the columns, and a mask done there would read dz and z, and write dy, down the columns
    too (measured 4 and 6 times slower than the two kernels at 64 x 1024 and 512 x 1024)."""
    if dy.shape != dz.shape or z.shape != dz.shape:
        raise ValueError("relu_backward_sum_rows: dy, dz, z must share one (N, F) shape")
    dyf, dzf, zf = dy.reshape(dy.size), dz.reshape(dz.size), z.reshape(z.size)
    if same_buffer(dy, dz):  # a loop over dy alone: it vectorises (elementwise.py says why)
        for i in range(dyf.size):
            dyf[i] = dyf[i] if zf[i] > 0 else 0
    else:
        for i in range(dyf.size):
            dyf[i] = dzf[i] if zf[i] > 0 else 0
    sum_rows(db, dy)


batchnorm2d_relu_forward_train = njit(parallel=True, cache=True)(_batchnorm2d_relu_forward_train)
batchnorm2d_add_relu_forward_train = njit(parallel=True, cache=True)(
    _batchnorm2d_add_relu_forward_train
)
batchnorm2d_relu_forward_apply = njit(parallel=True, cache=True)(_batchnorm2d_relu_forward_apply)
batchnorm2d_add_relu_forward_apply = njit(parallel=True, cache=True)(
    _batchnorm2d_add_relu_forward_apply
)
add_bias_relu_nchw = by_size(_add_bias_relu_nchw)
relu_backward_bias_grad_nchw = by_size(_relu_backward_bias_grad_nchw, on=2)
add_bias_rows_relu = by_size(_add_bias_rows_relu, on=1)
# serial, as sum_rows: a linear layer's bias gradient is small (reduce.py says why)
relu_backward_sum_rows = njit(cache=True)(_relu_backward_sum_rows)
