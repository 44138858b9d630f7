"""Converters of the convolutional networks' operators: Conv, MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool, BatchNormalization, LRN and Dropout (NCHW, 2-D)."""

from nnmem import autograd
from nnmem.ops.batchnorm import BatchNorm2d
from nnmem.ops.padding import PAD_MODES, auto_pads
from nnmem.ops.pooling import Pooling2d
from nnmem.sonnx.converters import converts

_CONV = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@converts("Conv", attributes=_CONV)
def conv(call, x, w, b=None):
    """Conv (2-D): y = W (*) x + b, with ONNX's pads [top, left, bottom, right]."""
    _check_2d(call, x)
    kernel = tuple(call.attr("kernel_shape", w.shape[2:]))
    stride = tuple(call.attr("strides", (1, 1)))
    dilation = tuple(call.attr("dilations", (1, 1)))
    pads = _pads(call, x.shape[2:], kernel, stride, dilation)
    kwargs = {}
    if dilation != (1, 1):
        kwargs["dilation"] = dilation
    return autograd.conv2d(
        x, w, b, stride=stride, padding=_padding(pads), group=call.attr("group", 1), **kwargs
    )


@converts("MaxPool", "AveragePool", attributes=_CONV + ("ceil_mode", "count_include_pad",
                                                      "storage_order"))  # fmt: skip
def pool(call, x):
    """MaxPool / AveragePool (2-D). Average pooling divides by the window's real elements
    unless count_include_pad=1 (ONNX's default is 0)."""
    _check_2d(call, x)
    kernel = tuple(call.attr("kernel_shape"))
    stride = tuple(call.attr("strides", (1, 1)))
    if tuple(call.attr("dilations", (1, 1))) != (1, 1):
        raise call.fail("pooling with dilations is not supported")
    if call.attr("storage_order", 0):
        raise call.fail("storage_order=1 (column-major argmax) is not supported")
    pads = _pads(call, x.shape[2:], kernel, stride, (1, 1))
    is_max = call.node.op_type == "MaxPool"
    if len([o for o in call.node.outputs if o]) > 1:
        raise call.fail("the Indices output of MaxPool is not produced")
    kwargs = {}
    if call.attr("ceil_mode", 0):
        kwargs["ceil_mode"] = True
    if not is_max:
        kwargs["count_include_pad"] = bool(call.attr("count_include_pad", 0))
    op = Pooling2d(kernel, stride, _padding(pads), is_max, **kwargs)
    return op(x)


@converts("GlobalAveragePool", "GlobalMaxPool")
def global_pool(call, x):
    """The mean (or maximum) over every spatial position: (N, C, H, W) -> (N, C, 1, 1)."""
    _check_2d(call, x)
    if call.node.op_type == "GlobalAveragePool":
        return autograd.globalaveragepool(x)
    return Pooling2d(x.shape[2:], x.shape[2:], (0, 0), True)(x)


@converts(
    "BatchNormalization",
    attributes=("epsilon", "momentum", "training_mode", "spatial", "consumed_inputs"),
    states=(3, 4),
)
def batch_norm(call, x, scale, bias, mean, var):
    """BatchNormalization. While training (autograd.training), the batch's statistics, and the
    running ones updated with ONNX's momentum (running = momentum * running + (1 - momentum)
    * batch, SINGA's convention too); otherwise the running statistics."""
    if x.ndim() != 4:
        raise call.fail(f"batch normalization of a {x.ndim()}-D input; nnmem normalises NCHW")
    if len([o for o in call.node.outputs if o]) > 1:
        raise call.fail("the running-statistics outputs are not produced (nnmem updates the "
                        "statistics in place while training)")  # fmt: skip
    if call.attr("spatial", 1) != 1:
        raise call.fail("spatial=0 (per-position statistics) is not supported")
    op = BatchNorm2d(mean, var, call.attr("momentum", 0.9), call.attr("epsilon", 1e-5))
    return op(x, scale, bias)


@converts("LRN", attributes=("alpha", "beta", "bias", "size"))
def lrn(call, x):
    """LRN: y = x / (bias + alpha/size * sum of x^2 over `size` channels)^beta, the window
    from c - floor((size-1)/2) to c + ceil((size-1)/2)."""
    size = call.attr("size")
    return autograd.lrn(
        x, size, call.attr("alpha", 1e-4), call.attr("beta", 0.75), call.attr("bias", 1.0),
        before=(size - 1) // 2,
    )  # fmt: skip


@converts("Dropout", attributes=("ratio", "seed", "is_test"), static=(1, 2), folded=False)
def dropout(call, x, ratio=None, training_mode=None):
    """Dropout: active while training (autograd.training), the identity otherwise. The
    optional mask output may be declared, not read."""
    mask = call.node.outputs[1] if len(call.node.outputs) > 1 else ""
    graph = call.rep.graph
    if mask and (graph.consumers.get(mask) or mask in graph.outputs):
        raise call.fail("the mask output of Dropout is read; nnmem does not produce it")
    rate = float(ratio) if ratio is not None else call.attr("ratio", 0.5)
    return autograd.dropout(x, rate)


def _check_2d(call, x):
    if x.ndim() != 4:
        raise call.fail(f"input of shape {x.shape}: nnmem runs 2-D (NCHW) convolutions and pools")


def _pads(call, size, kernel, stride, dilation):
    """ONNX's pads [top, left, bottom, right], from `pads` or auto_pad (nnmem.ops.conv)."""
    auto = call.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return tuple(call.attr("pads", (0, 0, 0, 0)))
    if auto not in PAD_MODES:
        raise call.fail(f"auto_pad {auto!r} is none of ONNX's {PAD_MODES}")
    return auto_pads(auto, size, kernel, stride, dilation)


def _padding(pads):
    """nnmem's padding: (ph, pw) when symmetric, else (top, left, bottom, right)."""
    top, left, bottom, right = pads
    return (top, left) if (top, left) == (bottom, right) else tuple(pads)
