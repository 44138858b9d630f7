"""Reading an ONNX file, with bounded memory and clear errors.

``load(path)`` is ``onnx.load`` for files a user hands nnmem: anything that is not a regular
file, a file larger than protobuf can hold, bytes that do not parse, or a tensor whose declared
size does not match the bytes it stores, is refused with one line that names the problem,
before any weight is copied. Weights stored beside the model (ONNX's external data) are read
only when asked for (``load_external_data=True``) and present: each must lie inside the
model's folder and hold exactly the bytes its shape needs. With ``load_external_data=False``
(or when the weight file is absent) the weights keep their shapes and no bytes: enough to
plan a step's memory (nnmem.sonnx.graph: Absent).
"""

import math
import os

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper

from nnmem.regular_file import open_regular

#: protobuf cannot parse a message of 2 GiB or more: a larger .onnx is not a model.
MAX_MODEL_BYTES = 2**31 - 1
#: The most elements one declared tensor may have (2**34: 64 GiB of float32). A file declaring
#: more is refused at once: it would allocate memory no machine nnmem runs on has.
MAX_ELEMENTS = 2**34


class OnnxFileError(ValueError):
    """The file is not a model nnmem can read; the message names the problem and the fix."""


def load(path, load_external_data=True):
    """The onnx.ModelProto in `path`, checked (see the module's docstring)."""
    path = os.fspath(path)
    with open_regular(path, lambda problem: OnnxFileError(f"{path}: {problem}")) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_MODEL_BYTES:
            raise OnnxFileError(
                f"{path}: {size} bytes, more than an ONNX protobuf can hold (2 GiB); store "
                "the weights as external data (onnx.save(..., save_as_external_data=True))"
            )
        data = f.read(MAX_MODEL_BYTES + 1)
    model = parse(data, path)
    if load_external_data:
        load_weights(model, os.path.dirname(os.path.abspath(path)), path)
    return model


def parse(data, where="the model"):
    """A ModelProto from bytes, with every declared tensor checked against its bytes."""
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as e:
        raise OnnxFileError(
            f"{where}: not an ONNX model (truncated or corrupt: {e}); export it again"
        ) from None
    if not model.HasField("graph"):
        raise OnnxFileError(f"{where}: no graph in the file; is it an ONNX model?")
    for t in tensors_of(model.graph):
        check_tensor(t, where)
    return model


def tensors_of(graph):
    """The graph's initializers and the tensors held by its Constant nodes' attributes."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def check_tensor(t, where):
    """Refuse a tensor whose shape is absurd or whose stored bytes do not match it."""
    if any(d < 0 for d in t.dims):
        raise OnnxFileError(f"{where}: tensor {t.name!r} has negative dimensions {list(t.dims)}")
    count = math.prod(t.dims)
    if count > MAX_ELEMENTS:
        raise OnnxFileError(
            f"{where}: tensor {t.name!r} declares {count} elements (dims {list(t.dims)}), "
            f"more than nnmem reads ({MAX_ELEMENTS}); the file is corrupt or hostile"
        )
    if t.data_type == onnx.TensorProto.STRING:
        return
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    if external_data_helper.uses_external_data(t):
        length = _external(t).get("length")
        if length is not None and int(length) != count * itemsize:
            raise OnnxFileError(
                f"{where}: tensor {t.name!r} of dims {list(t.dims)} declares {length} external "
                f"bytes, its shape needs {count * itemsize}; the file is corrupt"
            )
        return
    if t.HasField("raw_data"):
        stored = len(t.raw_data) // itemsize
    else:
        stored = max(len(getattr(t, f)) for f in _TYPED_FIELDS)
        if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
            stored //= 2
    if stored != count and not (t.data_type in _PACKED and stored >= count):
        raise OnnxFileError(
            f"{where}: tensor {t.name!r} of dims {list(t.dims)} needs {count} values, "
            f"the file stores {stored}; the file is truncated or corrupt"
        )


#: The repeated fields a TensorProto may hold its values in, when not in raw_data.
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")
#: Types several of which share one int32_data entry (float16, bfloat16 and 8-bit floats store
#: one per entry; int4 two).
_PACKED = (onnx.TensorProto.INT4, onnx.TensorProto.UINT4)


def _external(t):
    return {e.key: e.value for e in t.external_data}


def load_weights(model, folder, where):
    """Read the external weights that are present into `model` (in place). Each location must
    be a relative path inside `folder`, and hold offset + length bytes; a missing file leaves
    its tensors without bytes (planning needs none)."""
    for t in model.graph.initializer:
        if not external_data_helper.uses_external_data(t):
            continue
        info = _external(t)
        location = info.get("location", "")
        full = os.path.realpath(os.path.join(folder, location))
        if os.path.isabs(location) or not full.startswith(os.path.realpath(folder) + os.sep):
            raise OnnxFileError(
                f"{where}: tensor {t.name!r} points at {location!r}, outside the model's "
                "folder; external weights must lie beside the model"
            )
        if not os.path.exists(full):
            continue
        need = math.prod(t.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        offset = int(info.get("offset", 0))
        with open_regular(full, lambda p, n=location: OnnxFileError(f"{where}: {n}: {p}")) as f:
            available = os.fstat(f.fileno()).st_size - offset
            if available < need:
                raise OnnxFileError(
                    f"{where}: tensor {t.name!r} needs {need} bytes at offset {offset} of "
                    f"{location}, which holds {max(available, 0)}; the weight file is truncated"
                )
            f.seek(offset)
            t.raw_data = f.read(need)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
