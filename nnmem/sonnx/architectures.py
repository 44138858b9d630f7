"""BERT and GPT-2 as ONNX graphs, built with onnx.helper the way PyTorch's exporter writes them.

Nothing can be downloaded, so the importer's test models are made here. Each builder returns
an ``onnx.ModelProto`` whose nodes are the ones ``torch.onnx.export`` writes for the Hugging
Face model in evaluation mode (no Dropout): Gather for embeddings, MatMul + Add for every
linear layer, LayerNormalization (opset 17 on), Reshape/Transpose to split and merge heads,
Softmax over the last axis, and the GELU each model uses spelled out in elementary operators.

The memory contract, which is what a planner reads:

- every **weight** is a graph initializer, float32, named as in the PyTorch state dict, with
  a linear layer's matrix stored (in, out) so that ``y = x @ W + b`` is one MatMul;
- every other **constant** (positions, reshape shapes, scalars, the causal mask) is a
  Constant node: it is not a parameter and has no gradient;
- ``weights="absent"``: the initializers have dims and data type but no bytes; each points at
  an external file, ``weights.bin``, that does not exist (offset and length as a real export
  would have them). This is what ``onnx.load(path, load_external_data=False)`` gives for a
  real model, so a planner reads every shape without reading a byte;
- ``weights="random"``: small random arrays, for running tiny configurations.

Both output heads are tied to the token embedding: the logits are ``h @ wte^T``, one
initializer read by the Gather at the bottom and by the MatMul at the top, as in Hugging
Face's BertForMaskedLM and GPT2LMHeadModel. Hence ``parameter_count``: BERT-base with its MLM
head 109,514,298; GPT-2 small 124,439,808.
"""

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

#: The opset PyTorch's exporter (dynamo) writes, and onnxruntime runs; 17 is the first with
#: LayerNormalization, 18 the first with Split's ``num_outputs``.
OPSET = 18
#: The file the absent weights point at; it is never written.
WEIGHT_FILE = "weights.bin"
WEIGHT_KINDS = ("absent", "random")


class _Graph:
    """The nodes and weights of one graph being built, and the node names already used."""

    def __init__(self, weights, seed):
        if weights not in WEIGHT_KINDS:
            raise ValueError(f"weights={weights!r}: use one of {WEIGHT_KINDS}")
        self.absent = weights == "absent"
        self.rng = np.random.default_rng(seed)
        self.nodes, self.initializers = [], []
        self.offset = 0  # where the next absent weight starts in WEIGHT_FILE
        self.used = set()

    def weight(self, name, shape, std, mean=0.0):
        """A float32 initializer: N(mean, std^2) values, or dims pointing at absent bytes."""
        if self.absent:
            tensor = TensorProto(name=name, dims=shape, data_type=TensorProto.FLOAT)
            length = 4 * math.prod(shape)
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", WEIGHT_FILE),
                ("offset", self.offset),
                ("length", length),
            ):
                tensor.external_data.add(key=key, value=str(value))
            self.offset += length
        else:
            values = self.rng.normal(mean, std, size=shape).astype(np.float32)
            tensor = numpy_helper.from_array(values, name)
        self.initializers.append(tensor)
        return name

    def op(self, op_type, inputs, scope, outputs=1, **attributes):
        """Append one node named as PyTorch names it ('/scope/Op'); return its output name(s)."""
        name, k = f"/{scope}/{op_type}", 1
        while name in self.used:  # a second node of the same type in the same scope
            name, k = f"/{scope}/{op_type}_{k}", k + 1
        self.used.add(name)
        names = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, **attributes))
        return names[0] if outputs == 1 else names

    def constant(self, values, scope):
        """A Constant node holding ``values`` (not a weight: no gradient, not counted)."""
        return self.op("Constant", [], scope, value=numpy_helper.from_array(np.asarray(values)))

    def scalar(self, value, scope):
        return self.constant(np.array(value, np.float32), scope)

    def linear(self, x, prefix, scope, n_in, n_out):
        """``x @ W + b`` with W (n_in, n_out): MatMul then Add, as the exporter writes Linear."""
        w = self.weight(f"{prefix}.weight", [n_in, n_out], std=1 / math.sqrt(n_in))
        b = self.weight(f"{prefix}.bias", [n_out], std=0.1)
        return self.op("Add", [self.op("MatMul", [x, w], scope), b], scope)

    def layer_norm(self, x, prefix, scope, hidden, epsilon):
        """LayerNormalization over the last axis, with gain and bias of ``hidden`` elements."""
        gain = self.weight(f"{prefix}.weight", [hidden], std=0.1, mean=1.0)
        bias = self.weight(f"{prefix}.bias", [hidden], std=0.1)
        return self.op("LayerNormalization", [x, gain, bias], scope, axis=-1, epsilon=epsilon)

    def embedding(self, ids, name, scope, rows, hidden):
        """Gather rows of a (rows, hidden) table: the token, position or segment embedding."""
        self.weight(name, [rows, hidden], std=0.5)
        return self.op("Gather", [name, ids], scope)

    def model(self, input_ids, last, logits_shape, name):
        """The ModelProto; the last node's output ``last`` is renamed ``logits``."""
        assert self.nodes[-1].output[0] == last
        self.nodes[-1].output[0] = "logits"
        logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits_shape)
        graph = helper.make_graph(
            self.nodes, name, [input_ids], [logits], initializer=self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="nnmem.sonnx.architectures",
        )
        model.ir_version = helper.find_min_ir_version_for(model.opset_import)
        return model


def _check(hidden, heads, sequence, positions, batch):
    if hidden % heads:
        raise ValueError(f"hidden={hidden} is not a multiple of heads={heads}: change either")
    if not 0 < sequence <= positions:
        raise ValueError(
            f"sequence={sequence} must be in 1..{positions} (the position table's rows): "
            "shorten it or raise positions"
        )
    if batch is not None and batch < 1:
        raise ValueError(f"batch={batch}: give a positive batch, or None for a symbolic one")


def _batch_dim(batch):
    """The batch dimension: a number, or the symbol ``batch`` when it is not fixed."""
    return "batch" if batch is None else batch


def _inputs(g, batch, sequence, scope):
    """The (batch, sequence) int64 input and the (1, sequence) position ids beside it."""
    input_ids = helper.make_tensor_value_info(
        "input_ids", TensorProto.INT64, [_batch_dim(batch), sequence]
    )
    positions = g.constant(np.arange(sequence, dtype=np.int64)[None], scope)
    return input_ids, positions


def _attention(g, q, k, v, scope, heads, hidden, mask=None):
    """softmax(q k^T / sqrt(d) [masked]) v over ``heads`` heads of d = hidden / heads.

    q, k, v are (batch, S, hidden); each is reshaped to (batch, S, heads, d) and transposed to
    (batch, heads, S, d) (k to (batch, heads, d, S)); the result is merged back to
    (batch, S, hidden). A Reshape's 0 keeps that input dimension, so a symbolic batch works.
    ``mask`` (1, 1, S, S) bool: where False, the score is the float32 minimum (HF's fill).
    """
    d = hidden // heads
    split = g.constant(np.array([0, 0, heads, d], np.int64), scope)
    q, k, v = (g.op("Reshape", [t, split], scope) for t in (q, k, v))
    q = g.op("Transpose", [q], scope, perm=[0, 2, 1, 3])
    k = g.op("Transpose", [k], scope, perm=[0, 2, 3, 1])
    v = g.op("Transpose", [v], scope, perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k], scope), g.scalar(math.sqrt(d), scope)], scope)
    if mask is not None:
        fill = g.scalar(np.finfo(np.float32).min, scope)
        scores = g.op("Where", [mask, scores, fill], scope)
    context = g.op("MatMul", [g.op("Softmax", [scores], scope, axis=-1), v], scope)
    context = g.op("Transpose", [context], scope, perm=[0, 2, 1, 3])
    merge = g.constant(np.array([0, 0, hidden], np.int64), scope)
    return g.op("Reshape", [context, merge], scope)


def _gelu_erf(g, x, scope):
    """BERT's GELU as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = g.op("Erf", [g.op("Div", [x, g.scalar(math.sqrt(2.0), scope)], scope)], scope)
    one_plus = g.op("Add", [erf, g.scalar(1.0, scope)], scope)
    return g.op("Mul", [g.op("Mul", [x, one_plus], scope), g.scalar(0.5, scope)], scope)


def _gelu_tanh(g, x, scope):
    """GPT-2's GELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    cube = g.op("Pow", [x, g.scalar(3.0, scope)], scope)
    inner = g.op("Add", [x, g.op("Mul", [g.scalar(0.044715, scope), cube], scope)], scope)
    tanh = g.op(
        "Tanh", [g.op("Mul", [g.scalar(math.sqrt(2 / math.pi), scope), inner], scope)], scope
    )
    half_x = g.op("Mul", [g.scalar(0.5, scope), x], scope)
    return g.op("Mul", [half_x, g.op("Add", [g.scalar(1.0, scope), tanh], scope)], scope)


def _tied_logits(g, h, table, scope):
    """``h @ table^T``: the output head reads the token embedding (vocab, hidden) again."""
    return g.op("MatMul", [h, g.op("Transpose", [table], scope, perm=[1, 0])], scope)


def bert(
    layers=12,
    hidden=768,
    heads=12,
    intermediate=3072,
    vocab=30522,
    sequence=128,
    batch=None,
    weights="absent",
    seed=0,
    positions=512,
):
    """BertForMaskedLM: input_ids (batch, sequence) int64 -> logits (batch, sequence, vocab).

    Embeddings: token + position + segment (all segment ids 0, as when only input_ids is
    given), then LayerNorm. Each of ``layers`` post-LN blocks:
    ``x = LN(x + attention(x) W_o)``, ``x = LN(x + GELU(x W_1) W_2)`` with separate Q, K, V.
    MLM head: ``LN(GELU(x W_t)) @ wte^T + b`` (decoder tied to the token embedding).
    LayerNorm epsilon 1e-12; ``positions`` rows in the position table (512 in BERT).
    """
    _check(hidden, heads, sequence, positions, batch)
    g = _Graph(weights, seed)
    input_ids, position_ids = _inputs(g, batch, sequence, "bert/embeddings")
    e = "bert.embeddings"
    word = f"{e}.word_embeddings.weight"
    token = g.embedding("input_ids", word, "bert/embeddings/word", vocab, hidden)
    segment_ids = g.constant(np.zeros((1, sequence), np.int64), "bert/embeddings")
    place = g.embedding(
        position_ids,
        f"{e}.position_embeddings.weight",
        "bert/embeddings/position",
        positions,
        hidden,
    )
    segment = g.embedding(
        segment_ids, f"{e}.token_type_embeddings.weight", "bert/embeddings/token_type", 2, hidden
    )
    x = g.op("Add", [g.op("Add", [token, place], "bert/embeddings"), segment], "bert/embeddings")
    x = g.layer_norm(x, f"{e}.LayerNorm", "bert/embeddings/LayerNorm", hidden, 1e-12)
    for i in range(layers):
        p, s = f"bert.encoder.layer.{i}", f"bert/encoder/layer.{i}"
        q, k, v = (
            g.linear(x, f"{p}.attention.self.{n}", f"{s}/attention/self/{n}", hidden, hidden)
            for n in ("query", "key", "value")
        )
        a = _attention(g, q, k, v, f"{s}/attention/self", heads, hidden)
        a = g.linear(
            a, f"{p}.attention.output.dense", f"{s}/attention/output/dense", hidden, hidden
        )
        x = g.op("Add", [a, x], f"{s}/attention/output")
        o = f"{p}.attention.output.LayerNorm"
        x = g.layer_norm(x, o, f"{s}/attention/output/LayerNorm", hidden, 1e-12)
        f = g.linear(x, f"{p}.intermediate.dense", f"{s}/intermediate/dense", hidden, intermediate)
        f = _gelu_erf(g, f, f"{s}/intermediate/intermediate_act_fn")
        f = g.linear(f, f"{p}.output.dense", f"{s}/output/dense", intermediate, hidden)
        x = g.op("Add", [f, x], f"{s}/output")
        x = g.layer_norm(x, f"{p}.output.LayerNorm", f"{s}/output/LayerNorm", hidden, 1e-12)
    t = "cls/predictions/transform"
    x = g.linear(x, "cls.predictions.transform.dense", f"{t}/dense", hidden, hidden)
    x = _gelu_erf(g, x, f"{t}/transform_act_fn")
    x = g.layer_norm(x, "cls.predictions.transform.LayerNorm", f"{t}/LayerNorm", hidden, 1e-12)
    x = _tied_logits(g, x, word, "cls/predictions/decoder")
    bias = g.weight("cls.predictions.bias", [vocab], std=0.1)
    logits = g.op("Add", [x, bias], "cls/predictions/decoder")
    return g.model(input_ids, logits, [_batch_dim(batch), sequence, vocab], "bert")


def gpt2(
    layers=12,
    hidden=768,
    heads=12,
    vocab=50257,
    sequence=1024,
    batch=None,
    weights="absent",
    seed=0,
    positions=1024,
):
    """GPT2LMHeadModel: input_ids (batch, sequence) int64 -> logits (batch, sequence, vocab).

    Embeddings: token + position. Each of ``layers`` pre-LN blocks:
    ``x = x + attention(LN(x)) W_o`` with one fused QKV matrix (hidden, 3 hidden) split in
    three and the causal mask (a (1, 1, S, S) lower-triangular bool constant, Where),
    ``x = x + GELU_tanh(LN(x) W_fc) W_proj``. Then a final LayerNorm and the LM head tied to
    the token embedding (no bias). LayerNorm epsilon 1e-5; ``positions`` rows (1024 in GPT-2).
    """
    _check(hidden, heads, sequence, positions, batch)
    g = _Graph(weights, seed)
    input_ids, position_ids = _inputs(g, batch, sequence, "transformer")
    token = g.embedding("input_ids", "transformer.wte.weight", "transformer/wte", vocab, hidden)
    place = g.embedding(
        position_ids, "transformer.wpe.weight", "transformer/wpe", positions, hidden
    )
    x = g.op("Add", [token, place], "transformer")
    causal = np.tril(np.ones((sequence, sequence), bool))[None, None]
    mask = g.constant(causal, "transformer")  # shared by every layer, as HF's buffer is
    for i in range(layers):
        p, s = f"transformer.h.{i}", f"transformer/h.{i}"
        h = g.layer_norm(x, f"{p}.ln_1", f"{s}/ln_1", hidden, 1e-5)
        qkv = g.linear(h, f"{p}.attn.c_attn", f"{s}/attn/c_attn", hidden, 3 * hidden)
        q, k, v = g.op("Split", [qkv], f"{s}/attn", outputs=3, axis=2, num_outputs=3)
        a = _attention(g, q, k, v, f"{s}/attn", heads, hidden, mask)
        a = g.linear(a, f"{p}.attn.c_proj", f"{s}/attn/c_proj", hidden, hidden)
        x = g.op("Add", [a, x], s)
        h = g.layer_norm(x, f"{p}.ln_2", f"{s}/ln_2", hidden, 1e-5)
        h = g.linear(h, f"{p}.mlp.c_fc", f"{s}/mlp/c_fc", hidden, 4 * hidden)
        h = _gelu_tanh(g, h, f"{s}/mlp/act")
        h = g.linear(h, f"{p}.mlp.c_proj", f"{s}/mlp/c_proj", 4 * hidden, hidden)
        x = g.op("Add", [h, x], s)
    x = g.layer_norm(x, "transformer.ln_f", "transformer/ln_f", hidden, 1e-5)
    logits = _tied_logits(g, x, "transformer.wte.weight", "lm_head")
    return g.model(input_ids, logits, [_batch_dim(batch), sequence, vocab], "gpt2")


def parameter_count(model):
    """The number of weight elements: the sum of the initializers' sizes (a tied weight once)."""
    return sum(math.prod(t.dims) for t in model.graph.initializer)


def save_without_weights(model, path):
    """Write the graph alone; the absent weights stay absent (no ``weights.bin`` is written).

    ``onnx.load(path, load_external_data=False)`` reads it back with every shape.
    """
    holding = [t.name for t in model.graph.initializer if t.HasField("raw_data")]
    if holding:
        raise ValueError(
            f"{len(holding)} weights hold bytes (first: {holding[0]}): build the model with "
            "weights='absent', or save it with onnx.save"
        )
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
