"""onnx's own backend test data run through nnmem's ONNX backend (SINGA's
test/python/test_onnx_backend.py): every case of onnx's `node`, `simple`, `pytorch-converted`
and `pytorch-operator` folders, prepared by nnmem.sonnx.SingaBackend and compared with the
outputs stored beside it by onnx's own runner (onnx.backend.test.BackendTest).

A case nnmem cannot run is skipped, never hidden: the skip reason is nnmem's own refusal
(nnmem.sonnx.Unsupported), which names the node, the operator, the opset and what is missing
(an operator, an attribute, a dtype). A case nnmem accepts and gets wrong fails. The only
exceptions are listed one by one in KNOWN_FAILURES with their cause, as strict expected
failures: each turns into a failure the day it is fixed, so that its entry is removed.

Not run here: the CUDA variants (the same cases on a GPU, skipped by the runner where none
is), and onnx's `light` models (ResNet-50 and the like at 224x224, seconds each; the
light-model test runs them, comparing the logits). `python bench/onnx_coverage.py` counts
every folder, `light` included.
"""

import json
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import onnx.backend.test
import pytest
from gradcheck import check_gradients
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from nnmem.sonnx import SingaBackend
from nnmem.sonnx.converters import elementwise

# the benchmark's backend, one definition (bench/ last on the path: it shadows nothing)
sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))
from onnx_coverage import CoverageBackend  # noqa: E402

#: Cases nnmem accepts but fails, and why (the file the cause lies in), as strict expected
#: failures: a fixed case fails until its entry is removed. None today.
KNOWN_FAILURES = {}


@pytest.fixture(autouse=True)
def _onnx_home(tmp_path, monkeypatch):
    """onnx's runner writes the light models' data under ONNX_HOME (~/.onnx otherwise)."""
    monkeypatch.setenv("ONNX_HOME", str(tmp_path / "onnx_home"))


def _backend_test():
    with warnings.catch_warnings():  # NumPy's overflow while onnx builds its node cases
        warnings.simplefilter("ignore")
        backend_test = onnx.backend.test.BackendTest(CoverageBackend, __name__)
    for name in KNOWN_FAILURES:
        backend_test.xfail(rf"^{name}_cpu$")
    cases = backend_test.test_cases
    del cases["OnnxBackendRealModelTest"]  # onnx's light models: the light-model test
    for case in cases.values():  # the CPU variants only (see the module's docstring)
        for name in [n for n in vars(case) if n.endswith("_cuda")]:
            delattr(case, name)
    return cases


CASES = _backend_test()
globals().update(CASES)


def test_known_failures_name_real_cases():
    """An entry of KNOWN_FAILURES that names no case would silently excuse nothing."""
    names = {name for case in CASES.values() for name in dir(case) if name.startswith("test_")}
    assert {f"{name}_cpu" for name in KNOWN_FAILURES} <= names


def test_the_coverage_benchmark_counts_by_running(tmp_path):
    """bench/onnx_coverage.py on two folders: every case counted once, the skips grouped by
    what is missing, and the counts those of this module's cases (run, not written down)."""
    script = Path(__file__).resolve().parent.parent / "bench" / "onnx_coverage.py"
    out = tmp_path / "coverage.json"
    flags = ["--folders", "simple", "pytorch-operator", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(script), *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    folders = json.loads(out.read_text())["folders"]
    for folder, case in (("simple", "Simple"), ("pytorch-operator", "PyTorchOperator")):
        row = folders[folder]
        names = [n for n in vars(CASES[f"OnnxBackend{case}ModelTest"]) if n.startswith("test_")]
        assert row["passed"] + row["failed"] + row["skipped"] == len(names)
        assert sum(row["skipped_by"].values()) == row["skipped"]
    assert folders["simple"]["skipped_by"]["inputs of element type STRING"] == 6  # string models


# -- what onnx's data does not reach at nnmem's opsets -------------------------------------------
@pytest.mark.parametrize("op_type", ["HardSwish", "Mish"])
def test_self_gated_activations_backward(op_type):
    """HardSwish and Mish are made of nnmem's operators: their gradient through both factors
    (away from HardSwish's kinks at +-3)."""
    call = types.SimpleNamespace(node=types.SimpleNamespace(op_type=op_type))
    x = np.random.default_rng(0).uniform(-2.5, 2.5, (3, 4))
    check_gradients(lambda t: elementwise.self_gated(call, t), x, rtol=1e-5, atol=1e-7)


def test_where_with_an_infinite_constant_branch_masks_a_softmax():
    """Softmax(Where(mask, scores, -inf)), an attention mask: nnmem's arithmetic where would
    give NaN (0 * inf); the converter makes the constant finite, and the result is ONNX's."""
    nodes = [
        helper.make_node("Where", ["mask", "scores", "minus_inf"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "masked_softmax",
        [
            helper.make_tensor_value_info("mask", TensorProto.BOOL, (2, 3)),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, (2, 3)),
        ],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, (2, 3))],
        [numpy_helper.from_array(np.array(-np.inf, np.float32), "minus_inf")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    scores = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    (got,) = SingaBackend.prepare(model).run([mask, scores])
    (want,) = ReferenceEvaluator(model).run(None, {"mask": mask, "scores": scores})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got[1, 0] == 1.0 and got[0, 2] == 0.0
