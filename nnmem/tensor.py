"""Tensor: a shape, a dtype and a reference to a Block in its device's pool.

A Tensor owns no bytes itself. Its data lives in a Block of the device's pool; the Block is
allocated when the tensor is first written and freed when the last Tensor that refers to it is
gone. Views (``reshape``) are new Tensors on the same Block.
"""

import math

import numpy as np

from nnmem import device as _device

float16 = np.dtype(np.float16)  # storage only: kernels compute in float32 (devices/half.py)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
_DTYPES = (float16, float32, float64, int32, np.dtype(np.int64))  # int64: internal counters

#: A tensor of at most this many elements shows its values in repr (NumPy and PyTorch print up
#: to 1,000 in full); a larger one shows its shape only, without copying its bytes.
REPR_ELEMENTS = 1000


class Shape(tuple):
    """A tensor's shape: a tuple of ints, which can also be called, as SINGA's C++ tensor's
    ``shape()`` is: ``y.creator.backward(dy.data)`` gives tensors that SINGA's code asks for
    ``dx.shape()`` (``Tensor.data`` is the tensor itself here: nnmem has no C++ tensor)."""

    __slots__ = ()

    def __call__(self):
        return self


def check_dtype(dtype):
    """`dtype` as a NumPy dtype, or a TypeError when nnmem tensors cannot hold it."""
    dtype = np.dtype(dtype)
    if dtype not in _DTYPES:
        raise TypeError(
            f"nnmem tensors hold float16, float32, float64 or int32, not {dtype}; "
            "convert the data with .astype(np.float32) (or np.int32 for labels)"
        )
    return dtype


class Tensor:
    """An n-dimensional array in a device's pool (SINGA's signature).

    Tensor(shape, device, dtype) makes a tensor whose memory is allocated lazily.
    requires_grad: autograd computes a gradient flowing into it.
    stores_grad: autograd yields its gradient from ``autograd.backward`` (parameters).
    """

    # NumPy hands `ndarray + tensor` to the tensor (which refuses it, as `tensor + ndarray`),
    # instead of adding the tensor to every element into an object array of tensors.
    __array_ufunc__ = None

    def __init__(
        self,
        shape=(),
        device=None,
        dtype=float32,
        data=None,
        requires_grad=True,
        stores_grad=False,
        creator=None,
        name=None,
    ):
        if data is not None:
            data = np.asarray(data)
            shape = data.shape
            dtype = data.dtype if dtype is None else dtype
        self.shape = Shape(int(s) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"a tensor shape cannot have negative sizes: {self.shape}")
        self.dtype = check_dtype(dtype)
        self.device = device if device is not None else _device.get_default_device()
        self.requires_grad = requires_grad
        self.stores_grad = stores_grad
        self.creator = creator
        self.name = name
        nbytes = self.size() * self.dtype.itemsize
        self._set_block(self.device.new_block(nbytes, self._describe()))
        if data is not None:
            self.copy_from_numpy(data)

    @classmethod
    def _on_block(cls, block, shape, dtype, device, requires_grad=False):
        """A new Tensor object that shares `block` (a view: no new memory)."""
        t = cls.__new__(cls)
        t.shape, t.dtype, t.device = Shape(shape), np.dtype(dtype), device
        t.requires_grad, t.stores_grad, t.creator, t.name = requires_grad, False, None, None
        t._set_block(block)
        return t

    def _set_block(self, block):
        block.inc_ref()
        self.block = block

    def __del__(self):
        block = getattr(self, "block", None)
        if block is not None:
            block.dec_ref()

    def _describe(self):
        return f"{self._label()} {self.shape} {self.dtype}"

    def _label(self):
        return f"tensor {self.name}" if self.name else "tensor"

    # -- shape ----------------------------------------------------------------------------
    def ndim(self):
        return len(self.shape)

    def size(self):
        return math.prod(self.shape)

    def memsize(self):
        """Bytes of data (not counting the pool's alignment rounding)."""
        return self.size() * self.dtype.itemsize

    @property
    def raw(self):
        """The view of this tensor's bytes in the pool (no copy): a NumPy array on the CPU, a
        numba.cuda device array on a GPU. Kernels use it; it is valid only while the block
        stays allocated, so Python code should use to_numpy()."""
        return self.block.array(self.shape, self.dtype)

    # -- host-side writes ---------------------------------------------------------------------
    # These are the user's writes from the host, outside any recorded training step (SINGA
    # switches its graph off for them too), so they allocate and write directly.
    def _host_write(self, write):
        """Allocate (lazily), then let write(array) fill a host array that the device copies
        into the bytes (on the CPU the array *is* the bytes; on a planning device only the
        allocation happens). Returns self. See Device.write_from_host."""
        return self.device.write_from_host(self, write)

    def copy_from_numpy(self, np_array, offset=0):
        """Copy a NumPy array with as many elements as this tensor into it (row by row, as
        SINGA: a (64, 784) batch fills a (64, 1, 28, 28) tensor).

        The dtype must be this tensor's, or convert without loss: uint8 -> float32, int64
        labels that fit in int32, float labels that are whole numbers (SINGA's examples copy
        float one-hot rows into int tensors); anything else (0.5 into an int, 1e40 into a
        float32) is refused rather than silently rounded.
        """
        a = np.asarray(np_array)
        if offset != 0:
            raise ValueError(
                "copy_from_numpy(offset=...) is not supported; slice the array instead"
            )
        if a.size != self.size():
            raise ValueError(
                f"copy_from_numpy: array of shape {a.shape} ({a.size} elements) into "
                f"{self._label()} of shape {self.shape} ({self.size()}); give an array with "
                f"as many elements, or make a tensor of shape {a.shape}"
            )
        a = a.reshape(self.shape)  # SINGA copies any array of the same size, row by row
        if a.dtype != self.dtype and not _lossless(a, self.dtype):
            raise TypeError(
                f"copy_from_numpy: array of dtype {a.dtype} into {self._label()} of dtype "
                f"{self.dtype} would lose information; convert it first: "
                f"a.astype(np.{self.dtype})"
            )
        return self._host_write(lambda array: array.__setitem__(Ellipsis, a))

    def copy_data(self, t):
        """Copy the data of tensor `t` (same number of elements) into this tensor.

        On one device with one dtype it is a device operation (no trip through the host), so a
        recorded step replays it: SINGA's char-RNN keeps its LSTM state this way."""
        if t.device is not self.device or t.dtype != self.dtype:
            return self.copy_from_numpy(to_numpy(t).astype(self.dtype, copy=False))
        if t.size() != self.size():
            raise ValueError(
                f"copy_data: {t.shape} into {self._label()} of shape {self.shape}: the sizes differ"
            )
        copy = self.device.kernels.copy
        self.device.exec(
            lambda dst, src: copy(dst.reshape(-1), src.reshape(-1)),
            reads=(t,),
            writes=(self,),
            name=f"copy into {self._label()}",
        )
        return self

    def set_value(self, x):
        """Fill every element with the scalar `x`; returns self."""
        return self._host_write(lambda array: array.fill(x))

    def gaussian(self, mean, std):
        """Fill with samples of N(mean, std^2) from the device's generator; returns self."""
        return self._fill_random(self.device.rng.standard_normal, std, mean)

    def uniform(self, low, high):
        """Fill with samples of U[low, high) from the device's generator; returns self."""
        return self._fill_random(self.device.rng.random, high - low, low)

    def _fill_random(self, draw, scale, shift):
        """self = draw() * scale + shift, drawn straight into the pool bytes."""
        if self.dtype.kind != "f":
            raise TypeError(f"random fills need a float tensor, this one is {self.dtype}")

        def fill(a):
            if a.dtype == float16:  # NumPy draws float32 or float64 only
                a[...] = draw(size=a.shape, dtype=float32) * scale + shift
                return
            draw(out=a.reshape(-1), dtype=self.dtype)
            a *= scale
            a += shift

        return self._host_write(fill)

    def clone(self):
        """A new tensor with a copy of the data (new memory)."""
        return from_numpy(to_numpy(self), self.device)

    # t + u, t - u, t * u, t.reshape(shape), t.data (SINGA's handle of the C++ tensor: here the
    # tensor itself) and SINGA's other Tensor methods are attached by nnmem.ops.attach_to_tensor
    # (the operators sit above this module, which cannot import them).

    def __repr__(self):
        """``Tensor([2.3026], dtype=float32, device=cpu)``: the values of a written tensor of at
        most REPR_ELEMENTS elements, as NumPy prints them (4 decimals, as PyTorch); otherwise
        ``Tensor(shape=..., dtype=..., device=..., <why no values>)``: a larger tensor, one
        nothing wrote yet, one its graph-mode step is recording, one on a planning device.

        It never allocates, never runs a kernel and never raises: it reads only bytes that are
        there and written, and only when no other thread's step holds the device."""
        try:
            values, why_not = _values_for_repr(self)
        except Exception as e:  # a device that failed: say so, as a repr cannot raise
            values, why_not = None, f"values unreadable ({type(e).__name__})"
        # getattr: a debugger shows the `self` of an __init__ that failed half-way, too
        about = (
            f"dtype={getattr(self, 'dtype', None)}, "
            f"device={getattr(getattr(self, 'device', None), 'name', None)}"
        )
        if getattr(self, "name", None):
            about += f", name={self.name!r}"
        if values is None:
            return f"Tensor(shape={getattr(self, 'shape', None)}, {about}, {why_not})"
        text = np.array2string(
            values, precision=4, separator=", ", prefix="Tensor(", threshold=REPR_ELEMENTS
        )
        return f"Tensor({text}, {about})"


def _values_for_repr(t):
    """(a host copy of `t`'s values, None), or (None, why it has none to show): Tensor.__repr__.
    The device's lock is only tried: a repr never waits for another thread's step."""
    dev, block = t.device, t.block
    if not dev.runs_kernels:
        return None, "no values on a planning device"
    if block.offset is None:
        if block.host is not None:  # reading would fetch it back: an allocation
            return None, "evicted to host memory by the tensor cache"
        if dev.recorder is not None:
            return None, "no value yet: made by the step graph mode is recording"
        if dev.dry_run:
            return None, "no value: made by compile's shape-only pass"
        return None, "unwritten"
    if t.size() > REPR_ELEMENTS:
        return None, f"{t.size()} elements, not printed: tensor.to_numpy(t) reads them"
    if not dev.lock.acquire(blocking=False):
        return None, "values not read: another thread's step is running on the device"
    try:
        return dev.to_host(t), None
    finally:
        dev.lock.release()


def _lossless(a, dtype):
    """Whether every value of `a` survives conversion to `dtype` exactly: a safe cast, or
    integers (or whole-number floats, SINGA's one-hot labels) that fit an int dtype. Floats are
    never narrowed (float64 -> float32 rounds: convert the batch yourself)."""
    if np.can_cast(a.dtype, dtype, "safe"):
        return True
    if dtype.kind == "i" and a.dtype.kind in "iuf":
        if a.size == 0:
            return True
        info = np.iinfo(dtype)
        whole = a.dtype.kind != "f" or bool(np.all(np.floor(a) == a))
        return whole and float(a.min()) >= info.min and float(a.max()) <= info.max
    return False


class PlaceHolder(Tensor):
    """An input tensor: data enters the model through it (copy_from_numpy); no gradient."""

    def __init__(self, shape, device=None, dtype=float32, name="input"):
        super().__init__(shape, device, dtype, requires_grad=False, stores_grad=False, name=name)


def from_numpy(np_array, dev=None):
    """A new tensor on `dev` holding a copy of `np_array`. As SINGA, 64-bit integers become
    int32 (refused if a value does not fit) and bools float32; float64 stays float64 (nnmem
    keeps it, for exact gradient checks)."""
    a = np.asarray(np_array)
    if a.dtype.kind in "iu" and a.dtype != int32:
        if not _lossless(a, int32):
            raise TypeError(
                f"from_numpy: {a.dtype} values beyond the int32 range; nnmem's integer "
                "tensors are int32 (as SINGA's)"
            )
        a = a.astype(int32)
    elif a.dtype.kind == "b":
        a = a.astype(float32)
    # requires_grad, as SINGA's: an operation on it records its creator while training (a leaf
    # that stores no gradient still gets none from autograd.backward: see Operator.__call__)
    return Tensor(a.shape, dev, a.dtype, data=a)


def from_raw_tensor(t):
    """SINGA's wrapper of a C++ tensor (``t.data``, or what ``creator.backward`` returns) in a
    Python Tensor. nnmem's tensors are both: a new Tensor on the same block (no copy)."""
    return Tensor._on_block(t.block, t.shape, t.dtype, t.device, requires_grad=True)


def from_raw_tensors(tensors):
    return [from_raw_tensor(t) for t in tensors]


def to_numpy(t):
    """A NumPy copy of the tensor's data (a copy: the pool may reuse the bytes later), taken
    between steps when another thread is running one on the device."""
    return t.device.to_host(t)


def zeros_like(t):
    return Tensor(t.shape, t.device, t.dtype, requires_grad=False).set_value(0)


def zeros(shape, dev=None, dtype=float32):
    return Tensor(shape, dev, dtype, requires_grad=False).set_value(0)


def ones(shape, dev=None, dtype=float32):
    return Tensor(shape, dev, dtype, requires_grad=False).set_value(1)
