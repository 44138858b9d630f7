"""SINGA's sonnx module: ONNX models in and out of nnmem.

- ``prepare(onnx_model, device="CPU")`` -> a SingaRep whose ``run(inputs)`` gives the outputs;
- ``SONNXModel(onnx_model)`` -> a Model whose forward runs the graph, trainable with
  ``compile(..., use_graph=True)`` and every memory technique;
- ``to_onnx(inputs, y)`` -> a ModelProto of an nnmem model's forward (export.py);
- ``load(path)`` reads a file with bounded memory and clear errors (files.py); ``save`` is
  onnx.save.

How a graph becomes nnmem operators: graph.py (parse, sort, fold, check), converters/ (one
converter per ONNX operator), rep.py (run), model.py (train).
"""

import onnx

from nnmem.sonnx.converters import Unsupported
from nnmem.sonnx.export import ExportError, SingaFrontend, export, to_onnx
from nnmem.sonnx.files import OnnxFileError, load
from nnmem.sonnx.graph import Graph
from nnmem.sonnx.model import SONNXModel
from nnmem.sonnx.rep import SingaBackend, SingaRep, prepare, run_node

save = onnx.save

__all__ = [
    "ExportError",
    "Graph",
    "OnnxFileError",
    "SONNXModel",
    "SingaBackend",
    "SingaFrontend",
    "SingaRep",
    "Unsupported",
    "export",
    "load",
    "prepare",
    "run_node",
    "save",
    "to_onnx",
]
