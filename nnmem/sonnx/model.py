"""SONNXModel: an imported ONNX graph as a SINGA Model, trainable like any other.

``forward(*x)`` runs the graph (rep.SingaRep) with nnmem's operators, so compile's options all
apply to it: graph mode, recomputation, offload, a budget and the optimal plan. The graph's
weights become the model's parameters, named after the ONNX initializers ("/" and "." turned
into "_"), so ``get_params``, checkpoints and optimizers see them as they see a layer's.

``train_one_batch(x, y)`` is nnmem's addition (SINGA's users write their own): softmax
cross-entropy on the logits, then the optimizer. When the graph ends in a Softmax (an
ImageNet classifier's probabilities) the loss reads the Softmax's input, since the loss
contains the softmax. An output of three dimensions (a language model's (batch,
sequence, vocabulary)) of a model of token ids is a classification per token, with a label
per token; any other output is one classification per sample, (N, C) or (N, C, 1, 1).
"""

import numpy as np

from nnmem import autograd
from nnmem.model import Model
from nnmem.sonnx.dtypes import device_dtype
from nnmem.sonnx.graph import Graph
from nnmem.sonnx.rep import SingaRep


class SONNXModel(Model):
    """See the module's docstring. `onnx_model`: a ModelProto (onnx.load or sonnx.load)."""

    def __init__(self, onnx_model):
        super().__init__()
        graph = Graph(onnx_model)
        self.sg_ir = SingaRep(graph, None)
        self.logits = _logits_of(graph)
        self._registered = set()

    def forward(self, *x, aux_output=(), last_layers=None):
        """The graph's outputs (a list of Tensors) for inputs `x`; SINGA's `aux_output` and
        `last_layers` (rep.SingaRep.run_tensors)."""
        if self.sg_ir.dev is None:
            self.sg_ir.dev = x[0].device
        outputs = self.sg_ir.run_tensors(x, last_layers, aux_output)
        self._register()
        return outputs

    def train_one_batch(self, x, y):
        out = self.forward(x, aux_output=(self.logits,))[-1]
        if y.shape == x.shape and y.ndim() == 2:  # a label per token: (N, S, V) -> (N*S, V)
            logits = autograd.reshape(out, (-1, out.shape[-1]))
            y = autograd.reshape(y, (-1,))
        else:  # a class per sample: (N, C) or a convolutional head's (N, C, 1, 1)
            logits = autograd.reshape(out, (out.shape[0], -1))
        loss = autograd.softmax_cross_entropy(logits, y)
        self.optimizer(loss)
        return out, loss

    def label_shape(self, input_shape):
        """The labels train_one_batch takes for inputs of `input_shape`: one class per sample,
        or, for a model of token ids (an integer input of shape (N, S)), one per token."""
        spec = self.sg_ir.graph.inputs[0]
        if spec.dtype is not None and spec.dtype.kind in "iu" and len(input_shape) == 2:
            return tuple(input_shape)
        return (input_shape[0],)

    @property
    def input_dtype(self):
        """The dtype of the first input as nnmem keeps it (token ids as int32)."""
        return device_dtype(self.sg_ir.graph.inputs[0].dtype or np.float32)

    def _register(self):
        """Make the weights made at this run the model's parameters and states."""
        for kind, tensors in (("_params", self.sg_ir.params), ("_states", self.sg_ir.states)):
            for name, t in tensors.items():
                if name in self._registered:
                    continue
                key = name.replace("/", "_").replace(".", "_")
                if key in self._params or key in self._states:
                    raise ValueError(f"two ONNX weights are both named {key!r} once sanitised")
                self._registered.add(name)
                getattr(self, kind)[key] = t
                label = "parameter" if kind == "_params" else "state"
                t.name = key
                t.block.desc = f"{label} {key} {t.shape} {t.dtype}"


def _logits_of(graph):
    """The value the loss reads: the first output, or the input of the Softmax making it."""
    output = graph.outputs[0]
    for node in graph.nodes:
        if output in node.outputs and node.op_type == "Softmax":
            return node.inputs[0]
    return output
