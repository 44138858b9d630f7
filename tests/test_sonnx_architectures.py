"""BERT and GPT-2 built as ONNX graphs compute what the two transformers compute, and at full
size carry every weight's shape without a byte of weights (nnmem/sonnx/architectures.py)."""

import math
import time

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from nnmem.sonnx.architectures import bert, gpt2, parameter_count, save_without_weights

TINY = {"layers": 2, "hidden": 16, "heads": 2, "vocab": 50, "sequence": 8, "weights": "random"}
BUILDERS = {"bert": (bert, {"intermediate": 64}), "gpt2": (gpt2, {})}


def tiny(name, **changes):
    builder, extra = BUILDERS[name]
    return builder(**{**TINY, **extra, **changes})


# A plain NumPy transformer, in float64, written from the papers' equations: it shares the
# weights' names with the graph and nothing else.


def weights_of(model):
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


def layer_norm(x, w, prefix, epsilon):
    centred = x - x.mean(-1, keepdims=True)
    scaled = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + epsilon)
    return scaled * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]


def linear(x, w, prefix):
    return x @ w[f"{prefix}.weight"] + w[f"{prefix}.bias"]


def attention(q, k, v, heads, causal):
    batch, s, hidden = q.shape
    d = hidden // heads

    def split(t):
        return t.reshape(batch, s, heads, d).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ split(v)).transpose(0, 2, 1, 3).reshape(batch, s, hidden)


def gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def bert_numpy(w, ids, layers, heads):
    e = "bert.embeddings"
    x = w[f"{e}.word_embeddings.weight"][ids] + w[f"{e}.position_embeddings.weight"][: ids.shape[1]]
    x = layer_norm(x + w[f"{e}.token_type_embeddings.weight"][0], w, f"{e}.LayerNorm", 1e-12)
    for i in range(layers):
        p = f"bert.encoder.layer.{i}"
        q, k, v = (linear(x, w, f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
        a = linear(attention(q, k, v, heads, False), w, f"{p}.attention.output.dense")
        x = layer_norm(x + a, w, f"{p}.attention.output.LayerNorm", 1e-12)
        f = linear(gelu_erf(linear(x, w, f"{p}.intermediate.dense")), w, f"{p}.output.dense")
        x = layer_norm(x + f, w, f"{p}.output.LayerNorm", 1e-12)
    t = "cls.predictions.transform"
    x = layer_norm(gelu_erf(linear(x, w, f"{t}.dense")), w, f"{t}.LayerNorm", 1e-12)
    return x @ w[f"{e}.word_embeddings.weight"].T + w["cls.predictions.bias"]


def gpt2_numpy(w, ids, layers, heads):
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][: ids.shape[1]]
    for i in range(layers):
        p = f"transformer.h.{i}"
        qkv = linear(layer_norm(x, w, f"{p}.ln_1", 1e-5), w, f"{p}.attn.c_attn")
        a = attention(*np.split(qkv, 3, axis=-1), heads, True)
        x = x + linear(a, w, f"{p}.attn.c_proj")
        h = gelu_tanh(linear(layer_norm(x, w, f"{p}.ln_2", 1e-5), w, f"{p}.mlp.c_fc"))
        x = x + linear(h, w, f"{p}.mlp.c_proj")
    return layer_norm(x, w, "transformer.ln_f", 1e-5) @ w["transformer.wte.weight"].T


REFERENCES = {"bert": bert_numpy, "gpt2": gpt2_numpy}


def run(model, ids):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input_ids": ids})[0]


def token_ids(batch=3, seed=1):
    return np.random.default_rng(seed).integers(0, TINY["vocab"], (batch, TINY["sequence"]))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_tiny_models_pass_the_checker_with_every_shape_inferred(name):
    model = tiny(name)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shaped = {v.name for v in inferred.graph.value_info} | {"logits"}
    assert all(out in shaped for node in model.graph.node for out in node.output)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_onnxruntime_computes_what_numpy_computes(name):
    model = tiny(name)
    ids = token_ids()
    logits = run(model, ids)  # the batch is symbolic: 3 rows run through a "batch" graph
    assert logits.shape == (3, TINY["sequence"], TINY["vocab"])
    expected = REFERENCES[name](weights_of(model), ids, TINY["layers"], TINY["heads"])
    assert np.abs(expected).max() > 1  # the logits are not all near zero
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)


def test_a_fixed_batch_is_declared_in_the_graph():
    model = tiny("gpt2", batch=3)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, TINY["sequence"]]
    assert run(model, token_ids()).shape == (3, TINY["sequence"], TINY["vocab"])


@pytest.mark.parametrize("name, causal", [("gpt2", True), ("bert", False)])
def test_only_gpt2_hides_later_tokens(name, causal):
    model = tiny(name)
    ids = token_ids()
    changed = ids.copy()
    changed[:, -1] = (changed[:, -1] + 1) % TINY["vocab"]
    before, after = run(model, ids), run(model, changed)
    assert not np.allclose(before[:, -1], after[:, -1])
    assert np.array_equal(before[:, :-1], after[:, :-1]) == causal


def test_the_output_heads_are_tied_to_the_token_embedding():
    for model, table in ((bert(), "bert.embeddings.word_embeddings.weight"),
                         (gpt2(), "transformer.wte.weight")):  # fmt: skip
        readers = [n.op_type for n in model.graph.node if table in n.input]
        assert sorted(readers) == ["Gather", "Transpose"]


@pytest.mark.parametrize(
    "builder, count",
    [(bert, 109_514_298), (gpt2, 124_439_808)],  # Hugging Face's BertForMaskedLM, GPT2LMHeadModel
)
def test_full_size_models_have_the_published_parameter_counts(builder, count):
    start = time.perf_counter()
    model = builder()
    assert time.perf_counter() - start < 2
    assert parameter_count(model) == count
    assert all(not t.HasField("raw_data") for t in model.graph.initializer)


@pytest.mark.parametrize("builder", [bert, gpt2])
def test_absent_weights_point_at_a_file_that_is_never_written(builder, tmp_path):
    model = builder()
    onnx.save(model, tmp_path / "model.onnx")
    save_without_weights(model, tmp_path / "again.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.onnx", "model.onnx"]
    for path in ("model.onnx", "again.onnx"):
        start = time.perf_counter()
        loaded = onnx.load(tmp_path / path, load_external_data=False)
        assert time.perf_counter() - start < 0.5
        assert parameter_count(loaded) == parameter_count(model)
    offset = 0
    for t in loaded.graph.initializer:
        assert (
            t.data_location == onnx.TensorProto.EXTERNAL and t.data_type == onnx.TensorProto.FLOAT
        )
        where = {e.key: e.value for e in t.external_data}
        assert where == {"location": "weights.bin", "offset": str(offset),
                         "length": str(4 * math.prod(t.dims))}  # fmt: skip
        offset += 4 * math.prod(t.dims)


def test_full_size_shapes_are_inferred_without_weights():
    inferred = onnx.shape_inference.infer_shapes(gpt2(), strict_mode=True)
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 1024, 50257]
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in inferred.graph.value_info}  # fmt: skip
    scores = [s for name, s in shapes.items() if name.endswith("/attn/Softmax_output_0")]
    assert len(scores) == 12 and all(s == ["batch", 12, 1024, 1024] for s in scores)


def test_random_weights_are_refused_by_save_without_weights(tmp_path):
    with pytest.raises(ValueError, match="weights hold bytes"):
        save_without_weights(tiny("bert"), tmp_path / "m.onnx")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"heads": 5}, "not a multiple of heads=5"),
        ({"sequence": 2000}, "sequence=2000 must be in 1..512"),
        ({"batch": 0}, "batch=0"),
        ({"weights": "zeros"}, "weights='zeros'"),
    ],
)
def test_bad_configurations_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        bert(**changes)
