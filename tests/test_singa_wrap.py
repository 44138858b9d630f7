"""SINGA's singa_wrap functions (nnmem/ops/core_tensor.py, core_matrix.py), and SINGA-style
operators written with them.

Every function against NumPy on tiny tensors (one parametrized test; a case for each function,
checked below); bad input named in one line. Two SINGA-style operators, as SINGA's
documentation writes one (forward and backward on ``x.data``, with ``singa.*`` calls): their
gradients by ``y.creator.backward(dy)`` and by autograd.backward, against NumPy and finite
differences (tests/gradcheck.py: float64, every element, random cotangent); in a graph-mode
Model, the losses of eager mode and of nnmem's built-in operators, their kernels recorded under
the operator's label (backward ones in the backward phase), and the planned peak measured. The
functions that make one device call of their own also run on the CUDA device where a GPU or
the simulator is present (NUMBA_ENABLE_CUDASIM=1, a pytest process of its own)."""

import math

import numpy as np
import pytest
from gradcheck import check_gradients
from training import batches, train

from nnmem import autograd, device, layer, model, operation, tensor
from nnmem import singa_wrap as singa
from nnmem.ops import core_matrix, core_tensor

rng = np.random.default_rng(41)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def uniform(low, high, *shape):
    return rng.uniform(low, high, shape).astype(np.float32)


def ints(*shape):
    return rng.integers(-3, 4, shape).astype(np.int32)


def zeros(*shape):
    return np.zeros(shape, np.float32)


def on(dev, a):
    return tensor.from_numpy(np.asarray(a), dev)


def wrote(result, t):
    """t, which a SWIG function that returns nothing (None, checked) has written."""
    assert result is None, "SWIG's functions that write a tensor they are given return None"
    return t


def np_softmax(a, axis):
    """Softmax over a's axes from `axis` on, joined (SINGA's)."""
    rows = a.reshape(math.prod(a.shape[:axis]), -1)
    e = np.exp(rows - rows.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).reshape(a.shape)


def np_softmax_backward(dy, x):
    """dx of the softmax over x's axes from 1 on: y * (dy - sum(dy * y))."""
    y = np_softmax(x, 1)
    return y * (dy - (dy * y).sum(tuple(range(1, x.ndim)), keepdims=True))


X, Y, X3, A, B = f32(2, 3), f32(2, 3), f32(2, 3, 4), f32(2, 3), f32(3, 4)
Y[0, 0] = X[0, 0]  # an equal pair for __eq__
ROW, COL, P, K, L = f32(3), f32(2), uniform(0.5, 2, 2, 3), ints(2, 3), ints(2, 3)
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], np.float32)  # rounding's ties
PROBS, IDS, SOFT = np_softmax(f32(3, 4), 1), np.array([2, 0, 3], np.int32), uniform(0, 1, 3, 4)
ONE_HOT = np.eye(4, dtype=np.float32)[IDS]

COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
COMPARE["eq"] = np.equal
UNARY = {"Abs": np.abs, "Exp": np.exp, "Square": np.square, "Tanh": np.tanh, "Sin": np.sin}
UNARY.update(Cos=np.cos, Tan=np.tan, Sinh=np.sinh, Cosh=np.cosh, Atan=np.arctan)
UNARY.update(Asinh=np.arcsinh, Ceil=np.ceil, Floor=np.floor, Sign=np.sign)
UNARY.update(ReLU=lambda a: np.maximum(a, 0), Sigmoid=lambda a: 1 / (1 + np.exp(-a)))
UNARY.update(Erf=np.vectorize(math.erf, otypes=[np.float32]))
DOMAINS = {"Log": (np.log, P), "Sqrt": (np.sqrt, P), "Acosh": (np.arccosh, P + 1)}
DOMAINS.update({n: (f, uniform(-0.9, 0.9, 2, 3)) for n, f in
                (("Asin", np.arcsin), ("Acos", np.arccos), ("Atanh", np.arctanh))})  # fmt: skip
DOMAINS.update(Round=(lambda a: np.sign(a) * np.floor(np.abs(a) + 0.5), HALVES))
DOMAINS.update(RoundE=(np.round, HALVES))  # halves to even
ALONG = {"Add": np.add, "Sub": np.subtract, "Mult": np.multiply, "Div": np.divide}

# name (its first word: the function) -> (call on tensors, NumPy's result on arrays, arrays)
CASES = {
    "__add__": (singa.__add__, np.add, [X, ROW]),
    "__add__ int32": (singa.__add__, np.add, [K, L]),
    "__sub__": (singa.__sub__, np.subtract, [X, Y]),
    "__mul__": (singa.__mul__, np.multiply, [X, COL[:, None]]),
    "__div__": (singa.__div__, np.divide, [X, P]),
    **{
        f"__{n}__": (getattr(singa, f"__{n}__"), lambda a, b, f=f: f(a, b).astype(a.dtype), [X, Y])
        for n, f in COMPARE.items()
    },  # fmt: skip
    "__lt__ int32": (singa.__lt__, lambda a, b: (a < b).astype(np.int32), [K, L]),
    "Pow": (singa.Pow, np.power, [P, Y]),
    "AddFloat": (lambda t: singa.AddFloat(t, 0.5), lambda a: a + 0.5, [X]),
    "AddFloat int32": (lambda t: singa.AddFloat(t, 2), lambda a: a + 2.0, [K]),
    "SubFloat": (lambda t: singa.SubFloat(t, 0.5), lambda a: a - 0.5, [X]),
    "MultFloat": (lambda t: singa.MultFloat(t, -3), lambda a: a * -3, [X]),
    "DivFloat": (lambda t: singa.DivFloat(t, 4.0), lambda a: a / 4, [X]),
    "PowFloat": (lambda t: singa.PowFloat(t, 1.5), lambda a: a**1.5, [P]),
    "PowFloat int32": (lambda t: singa.PowFloat(t, 2), lambda a: a.astype(np.float32) ** 2, [K]),
    **{
        f"{n.upper()}Float": (
            lambda t, n=n: getattr(singa, f"{n.upper()}Float")(t, 0.1),
            lambda a, f=f: f(a, np.float32(0.1)).astype(a.dtype),
            [X],
        )
        for n, f in COMPARE.items()
    },  # fmt: skip
    "EQFloat equal": (
        lambda t: singa.EQFloat(t, float(X[1, 2])),
        lambda a: (a == X[1, 2]).astype(a.dtype),
        [X],
    ),
    "Add": (lambda a, b, r: wrote(singa.Add(a, b, r), r), lambda a, b, r: a + b, [X, ROW, X]),
    "Sub": (lambda a, b, r: wrote(singa.Sub(a, b, r), r), lambda a, b, r: a - b, [X, Y, X]),
    "EltwiseMult": (
        lambda a, b, r: wrote(singa.EltwiseMult(a, b, r), r),
        lambda a, b, r: a * b,
        [X, Y, X],
    ),  # fmt: skip
    "Div": (lambda a, b, r: wrote(singa.Div(a, b, r), r), lambda a, b, r: a / b, [X, P, X]),
    "PowWithRet": (
        lambda a, b, r: wrote(singa.PowWithRet(a, b, r), r),
        lambda a, b, r: a**b,
        [P, Y, X],
    ),  # fmt: skip
    **{
        f"{n}WithRet": (
            lambda t, r, n=n: wrote(getattr(singa, f"{n}WithRet")(t, 2.0, r), r),
            lambda a, r, f=f: f(a, np.float32(2)),
            [P, X],
        )
        for n, f in (
            ("AddFloat", np.add),
            ("SubFloat", np.subtract),
            ("EltwiseMultFloat", np.multiply),
            ("DivFloat", np.divide),
            ("PowFloat", np.power),
        )
    },  # fmt: skip
    **{n: (getattr(singa, n), f, [X]) for n, f in UNARY.items()},
    **{n: (getattr(singa, n), f, [a]) for n, (f, a) in DOMAINS.items()},
    "ReLUBackward": (singa.ReLUBackward, lambda dy, x: dy * (x > 0), [Y, X]),
    "Reshape": (lambda t: singa.Reshape(t, [3, 2]), lambda a: a.reshape(3, 2), [X]),
    "Contiguous": (singa.Contiguous, lambda a: a, [X]),
    "Transpose": (lambda t: singa.Transpose(t, [1, 0, 2]), lambda a: a.transpose(1, 0, 2), [X3]),
    "DefaultTranspose": (singa.DefaultTranspose, lambda a: a.T, [X3]),
    "SliceOn": (lambda t: singa.SliceOn(t, 1, 3, 2), lambda a: a[:, :, 1:3], [X3]),
    "ConcatOn": (
        lambda a, b: singa.ConcatOn(singa.VecTensor([a, b]), 1),
        lambda a, b: np.concatenate([a, b], 1),
        [X, Y],
    ),  # fmt: skip
    "Sum over rows": (lambda t: singa.Sum(t, 0), lambda a: a.sum(0), [X]),
    "Sum over columns": (lambda t: singa.Sum(t, 1), lambda a: a.sum(1), [X]),
    "SumAll": (singa.SumAll, lambda a: a.sum(keepdims=True).reshape(1), [X]),
    "SumAsFloat": (singa.SumAsFloat, lambda a: a.sum(dtype=np.float64), [X]),
    "Average": (lambda t: singa.Average(t, 1), lambda a: a.mean(1), [X]),
    "SumRows": (lambda m, v: wrote(singa.SumRows(m, v), v), lambda m, v: m.sum(0), [X, ROW]),
    "SumColumns": (lambda m, v: wrote(singa.SumColumns(m, v), v), lambda m, v: m.sum(1), [X, COL]),
    **{
        f"{n}Row": (
            lambda v, m, n=n: wrote(getattr(singa, f"{n}Row")(v, m), m),
            lambda v, m, f=f: f(m, v),
            [uniform(0.5, 2, 3), X],
        )
        for n, f in ALONG.items()
    },  # fmt: skip
    **{
        f"{n}Column": (
            lambda v, m, n=n: wrote(getattr(singa, f"{n}Column")(v, m), m),
            lambda v, m, f=f: f(m, v[:, None]),
            [uniform(0.5, 2, 2), X],
        )
        for n, f in ALONG.items()
    },  # fmt: skip
    "AddRowWithScale": (
        lambda v, m: wrote(singa.AddRowWithScale(2, 0.5, v, m), m),
        lambda v, m: 2 * v + 0.5 * m,
        [ROW, X],
    ),  # fmt: skip
    "AddColumnWithScale": (
        lambda v, m: wrote(singa.AddColumnWithScale(2, 0.5, v, m), m),
        lambda v, m: 2 * v[:, None] + 0.5 * m,
        [COL, X],
    ),  # fmt: skip
    "Axpy": (lambda x, y: wrote(singa.Axpy(0.5, x, y), y), lambda x, y: y + 0.5 * x, [X, Y]),
    "Axpy with a tensor alpha": (
        lambda a, x, y: wrote(singa.Axpy(a, x, y), y),
        lambda a, x, y: y + a * x,
        [np.float32([0.5]), X, Y],
    ),  # fmt: skip
    "Mult": (singa.Mult, np.matmul, [A, B]),
    "Mult by a vector": (singa.Mult, np.matmul, [A, ROW]),
    "Mult of batches": (singa.Mult, np.matmul, [f32(2, 2, 3), f32(2, 3, 4)]),
    "MultWithRet": (
        lambda a, b, c: wrote(singa.MultWithRet(a, b, c), c),
        lambda a, b, c: a @ b,
        [A, B, zeros(2, 4)],
    ),  # fmt: skip
    "MultWithScale": (
        lambda a, b, c: wrote(singa.MultWithScale(2, a, b, 0.5, c), c),
        lambda a, b, c: 2 * (a @ b) + 0.5 * c,
        [A, B, f32(2, 4)],
    ),  # fmt: skip
    "SoftMax": (singa.SoftMax, lambda a: np_softmax(a, 1), [X]),
    "SoftMax of a vector": (singa.SoftMax, lambda a: np_softmax(a, 0), [ROW]),
    "SoftMax from an axis": (lambda t: singa.SoftMax(t, 1), lambda a: np_softmax(a, 1), [X3]),
    "SoftMax into out": (
        lambda t, o: wrote(singa.SoftMax(t, o, -1), o),
        lambda a, o: np_softmax(a, 1),
        [X, X],
    ),  # fmt: skip
    "SoftMaxBackward": (
        lambda dy, x: singa.SoftMaxBackward(dy, 1, singa.SoftMax(x, 1)),
        np_softmax_backward,
        [f32(2, 3, 4), X3],
    ),  # fmt: skip
    "CrossEntropyFwd": (singa.CrossEntropyFwd, lambda p, t: -np.log(p[range(3), t]), [PROBS, IDS]),
    "CrossEntropyFwd of soft targets": (
        singa.CrossEntropyFwd,
        lambda p, t: -(t / t.sum(1, keepdims=True) * np.log(p)).sum(1),
        [PROBS, SOFT],
    ),
    "SoftmaxCrossEntropyBwd": (
        singa.SoftmaxCrossEntropyBwd,
        lambda p, t: p - ONE_HOT,
        [PROBS, IDS],
    ),
    "SoftmaxCrossEntropyBwd of one-hot rows": (
        singa.SoftmaxCrossEntropyBwd,
        lambda p, t: p - t,
        [PROBS, ONE_HOT.astype(np.int32)],
    ),
    "CopyDataToFrom": (
        lambda d, s: wrote(singa.CopyDataToFrom(d, s, 3, 1, 2), d),
        lambda d, s: np.concatenate([d[:1], s[2:5], d[4:]]),
        [f32(6), f32(6)],
    ),  # fmt: skip
}
#: The functions that make a device call of their own (core_tensor.DeviceCall), and one that
#: writes its result into a tensor it is given: they also run on the CUDA device.
DEVICE_CALLS = ["ReLUBackward", "SoftMaxBackward", "CrossEntropyFwd", "SoftmaxCrossEntropyBwd"]
DEVICE_CALLS += ["Add", "SoftMax from an axis"]


@pytest.fixture
def cpu():
    return device.create_cpu_device("16MiB")


def computed(dev, name):
    call, _, arrays = CASES[name]
    got = call(*[on(dev, a) for a in arrays])
    return tensor.to_numpy(got) if isinstance(got, tensor.Tensor) else np.asarray(got)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_function_computes_what_numpy_does(cpu, name):
    _, reference, arrays = CASES[name]
    got, want = computed(cpu, name), np.asarray(reference(*[a.copy() for a in arrays]))
    assert got.shape == want.shape
    assert got.dtype.kind == want.dtype.kind, "int32 with int32 stays int32, else a float"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_every_function_has_a_case():
    functions = set(core_tensor.__all__ + core_matrix.__all__) - {"Tensor", "VecTensor", "SizeOf"}
    functions -= {"kFloat32", "kFloat16", "kInt", "kDouble", "Gaussian", "Uniform", "Bernoulli"}
    assert functions - {name.split()[0] for name in CASES} == set()
    assert set(core_tensor.__all__ + core_matrix.__all__) <= set(singa.__all__) <= set(dir(singa))


@pytest.mark.parametrize("name", DEVICE_CALLS)
def test_the_cuda_device_computes_what_the_cpu_does(device_kind, name):
    if device_kind == "cpu":
        pytest.skip("compares the CUDA device with the CPU")
    want = computed(device.create_cpu_device("1MiB"), name)
    np.testing.assert_allclose(computed(device.create_cuda_gpu("1MiB"), name), want, rtol=1e-6)


def test_random_fills_types_and_sizes(cpu):
    t = tensor.Tensor((200,), cpu)
    assert singa.Uniform(2, 3, t) is None and np.all((2 <= tensor.to_numpy(t)) < 3)
    singa.Bernoulli(0.5, t)
    assert set(np.unique(tensor.to_numpy(t))) == {0.0, 1.0}
    singa.Gaussian(1.5, 0.0, t)
    assert np.all(tensor.to_numpy(t) == 1.5)
    assert singa.SizeOf(singa.kFloat32) == singa.SizeOf(singa.kInt) == 4
    assert singa.SizeOf(singa.kFloat16) == 2 and singa.SizeOf(singa.kDouble) == 8
    assert singa.Tensor is tensor.Tensor and t.dtype == singa.kFloat32
    assert singa.VecTensor([t, t]) == [t, t]


BAD = {
    "a number for a tensor": (lambda x: singa.__add__(x, 1.0), TypeError, "AddFloat"),
    "a string for a number": (lambda x: singa.MultFloat(x, "2"), TypeError, "takes a number"),
    "an int32 tensor": (lambda x: singa.Exp(x.as_type("int")), TypeError, "float tensors"),
    "a ret of another size": (lambda x: singa.Add(x, x, singa.SumAll(x)), ValueError, "size"),
    "a row of another size": (lambda x: singa.AddRow(x, x), ValueError, "needs 3"),
    "no axis for 3-D": (lambda x: singa.SoftMax(x.reshape((1, 2, 3))), ValueError, "an axis"),
    "float class ids": (lambda x: singa.CrossEntropyFwd(x, singa.Sum(x, 1)), TypeError, "int32"),
    "a class id too large": (
        lambda x: singa.SoftmaxCrossEntropyBwd(x, on(x.device, np.int32([1, 3]))),
        ValueError,
        "out of range",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_named_in_one_line(cpu, case):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words) as raised:
        call(on(cpu, X))
    assert "\n" not in str(raised.value)


# -- SINGA-style operators ----------------------------------------------------------------------
class Relu(autograd.Operator):
    """SINGA's documentation's example: forward and backward on the tensors' data."""

    def forward(self, x):
        if autograd.training:
            self.input = x
        return singa.ReLU(x)

    def backward(self, dy):
        dx = singa.GTFloat(self.input, 0.0)
        return singa.__mul__(dy, dx)


class ScaledProduct(autograd.Operator):
    """y = scale * a * b: da = scale * dy * b, db = scale * dy * a."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        if autograd.training:
            self.inputs = a, b
        return singa.MultFloat(singa.__mul__(a, b), self.scale)

    def backward(self, dy):
        a, b = self.inputs
        da = singa.MultFloat(singa.__mul__(dy, b), self.scale)
        return da, singa.MultFloat(singa.__mul__(dy, a), self.scale)


@pytest.fixture
def training():
    autograd.training = True
    yield
    autograd.training = False


def leaf(dev, a):
    return tensor.Tensor(
        a.shape, dev, tensor.float64, requires_grad=True, stores_grad=True
    ).copy_from_numpy(a)


def test_a_singa_style_operator_gives_its_gradients_eagerly(training):
    dev = device.create_cpu_device("16MiB")
    a, b, dy = (rng.standard_normal((2, 3)) for _ in range(3))
    x, w = leaf(dev, a), leaf(dev, b)
    with operation.tracing() as calls:
        h = Relu()(x)
        y = ScaledProduct(0.5)(h, w)
    assert [type(op) for op, _, _ in calls] == [Relu, ScaledProduct], "their parts: no calls"
    assert isinstance(y.creator, ScaledProduct) and isinstance(h.creator, Relu)
    dh, dw = y.creator.backward(on(dev, dy))
    np.testing.assert_allclose(tensor.to_numpy(dw), 0.5 * dy * np.maximum(a, 0))
    np.testing.assert_allclose(tensor.to_numpy(h.creator.backward(dh)), 0.5 * dy * b * (a > 0))
    grads = dict(autograd.backward(ScaledProduct(0.5)(Relu()(x), w), on(dev, dy)))
    np.testing.assert_allclose(tensor.to_numpy(grads[x]), 0.5 * dy * b * (a > 0))
    np.testing.assert_allclose(tensor.to_numpy(grads[w]), 0.5 * dy * np.maximum(a, 0))
    check_gradients(lambda x, w: ScaledProduct(0.5)(Relu()(x), w), a, b)


class Net(model.Model):
    """fc1, then relu, then a gate: 0.5 * h * fc_gate(x), then fc2; SINGA-style operators or
    nnmem's built-in ones (same numbers: times 0.5 is exact in either order)."""

    def __init__(self, singa_style):
        super().__init__()
        self.fc1, self.gate, self.fc2 = layer.Linear(6), layer.Linear(6), layer.Linear(3)
        self.loss, self.singa_style = layer.SoftMaxCrossEntropy(), singa_style

    def forward(self, x):
        h, g = self.fc1(x), self.gate(x)
        if self.singa_style:
            return self.fc2(ScaledProduct(0.5)(Relu()(h), g))
        return self.fc2(autograd.mul(autograd.relu(h), g) * 0.5)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def test_a_singa_style_operator_in_graph_mode():
    data = batches((4, 5), 4, classes=3)
    net = Net(True)
    losses, states, dev, tx, ty = train(net, data, use_graph=True)
    assert losses == train(Net(True), data, use_graph=False)[0], "graph mode changes no number"
    builtin = train(Net(False), data, use_graph=True)
    assert losses == builtin[0]
    for key, value in states.items():
        np.testing.assert_array_equal(value, builtin[1][key], err_msg=key)
    step = net.compiled_step(tx, ty)
    kernels = [(node.name, node.phase) for node in step.nodes]
    assert kernels.count(("Relu", "forward")) == 1 and kernels.count(("Relu", "backward")) == 2
    assert kernels.count(("ScaledProduct", "forward")) == 2
    assert kernels.count(("ScaledProduct", "backward")) == 4
    assert not {"ReLU", "Gt", "Mul", "Scale"} & {name for name, _ in kernels}, "parts, unnamed"
    dev.reset_peak_memory_stats()
    net(tx, ty)
    assert dev.memory_stats()["allocated_bytes.peak"] == step.timeline.peak


def test_swig_tensor_methods_that_singas_modules_call():
    """SINGA's tensor.py calls t.data.AsType(kFloat32) and t.data.data_type()."""
    t = tensor.from_numpy(np.array([1, 2], np.int32), device.create_cpu_device("1MiB"))
    assert t.data.data_type() == singa.kInt
    f = t.data.AsType(singa.kFloat32)
    assert f.data_type() == singa.kFloat32
    np.testing.assert_array_equal(tensor.to_numpy(f), [1.0, 2.0])
