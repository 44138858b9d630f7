"""onnx's backend test data run through nnmem's ONNX backend: how many cases of each folder
pass, fail or are skipped, and what the skipped ones miss.

    python bench/onnx_coverage.py [--folders node simple pytorch-converted pytorch-operator
                                   light] [--failures] [--json out.json]

Every case of the onnx wheel's test data (onnx.backend.test: `node`, built by onnx's own
scripts; `simple`, `pytorch-converted`, `pytorch-operator` and `light`, stored models and
outputs) is run by onnx's runner (BackendTest) on the CPU, through nnmem.sonnx.SingaBackend,
as tests/test_onnx_backend.py does: nothing here is counted by hand. A case is

- **passed** when nnmem's outputs match onnx's stored ones (the runner's tolerances);
- **skipped** when nnmem refuses it (nnmem.sonnx.Unsupported, at import or at its first
  run): the refusal names what is missing, and the skips are grouped by it (an operator, an
  attribute of one, an opset, a dtype);
- **failed** otherwise: nnmem accepted the model and got it wrong, or broke.

The light models (AlexNet to VGG-19 at 1x3x224x224) take seconds each. Their stored outputs
are probabilities of a final Softmax over equal logits of ~1e19 (ConstantOfShape weights),
ill-conditioned: a light model can fail here on that alone. The last line is the JSON.
"""

import argparse
import collections
import os
import re
import tempfile
import time
import unittest
import warnings

import onnx.backend.test
from onnx_plans import machine
from train import emit_json

from nnmem.cli.arguments import output_file
from nnmem.sonnx import SingaBackend, Unsupported

#: folder of onnx's test data -> the runner's test class of its cases (`light`: the runner's
#: "real" models, whose files the wheel ships as light_*.onnx)
FOLDERS = {
    "node": "OnnxBackendNodeModelTest",
    "simple": "OnnxBackendSimpleModelTest",
    "pytorch-converted": "OnnxBackendPyTorchConvertedModelTest",
    "pytorch-operator": "OnnxBackendPyTorchOperatorModelTest",
    "light": "OnnxBackendRealModelTest",
}


class RefusingRep:
    """A SingaRep whose refusals at its first run are skips, like those at import."""

    def __init__(self, rep):
        self.rep = rep

    def run(self, inputs, **kwargs):
        try:
            return self.rep.run(inputs, **kwargs)
        except Unsupported as e:
            raise unittest.SkipTest(f"refused at run: {e}") from None


class CoverageBackend(SingaBackend):
    """SingaBackend with nnmem's refusals reported as skips."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        try:
            return RefusingRep(super().prepare(model, device, **kwargs))
        except Unsupported as e:
            raise unittest.SkipTest(str(e)) from None


def missing(reason):
    """What a skip reason says is missing, without the node's name and shapes, so that the
    skips of one cause group together: 'Shrink', 'MaxPool: pooling with dilations ...'."""
    reason = reason.removeprefix("refused at run: ")
    found = re.search(r"operator (\S+) is not supported", reason)
    if found:
        return found.group(1)
    found = re.match(r"opset (\d+): nnmem reads opsets (\d+ to \d+)", reason)
    if found:
        return f"opset {found.group(1)} (nnmem reads {found.group(2)})"
    found = re.search(r"has element type (\w+)", reason)
    if found:
        return f"inputs of element type {found.group(1)}"
    found = re.search(r"operators of domain '([^']*)'", reason)
    if found:
        return f"domain {found.group(1)}"
    found = re.match(r"node '.*?' \((\w+), opset \d+\): (.*)", reason)
    if found:
        op, what = found.groups()
        return f"{op}: " + re.sub(r"\([\d, ]+\)", "(...)", what)
    return reason


def run_folder(cases):
    """{"passed": [...], "failed": {name: first line}, "skipped": {name: reason}} of the
    CPU cases of one runner class."""
    names = sorted(n for n in vars(cases) if n.startswith("test_") and n.endswith("_cpu"))
    suite = unittest.TestSuite(cases(name) for name in names)
    result = unittest.TestResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's overflow in the cases' own data
        suite.run(result)
    failed = {t._testMethodName: _summary(trace) for t, trace in result.failures + result.errors}
    skipped = {t._testMethodName: reason for t, reason in result.skipped}
    passed = [n for n in names if n not in failed and n not in skipped]
    return {"passed": passed, "failed": failed, "skipped": skipped}


def _summary(trace):
    """The exception of a traceback on one line, without the arrays NumPy prints."""
    lines = trace.strip().splitlines()
    raised = [i for i, line in enumerate(lines) if re.match(r"[\w.]+(Error|Exception)\b", line)]
    start = raised[-1] if raised else len(lines) - 1
    kept = []
    for line in lines[start:]:
        if line.lstrip().startswith(("ACTUAL:", "DESIRED:", "x:", "y:")):
            break
        kept.append(line.strip())
    return " ".join(k for k in kept if k)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", nargs="+", choices=list(FOLDERS), default=list(FOLDERS))
    parser.add_argument("--failures", action="store_true", help="print every failed case")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    results = {"machine": machine(), "onnx": onnx.__version__, "folders": {}}
    print(f"onnx {onnx.__version__} backend test data through nnmem, on {results['machine']}")
    with tempfile.TemporaryDirectory() as home, warnings.catch_warnings():
        os.environ["ONNX_HOME"] = home  # the runner writes the light models' data here
        warnings.simplefilter("ignore")  # NumPy's overflow while onnx builds its node cases
        runner_classes = onnx.backend.test.BackendTest(CoverageBackend, __name__).test_cases
        print(f"\n{'folder':18} {'cases':>6} {'passed':>7} {'failed':>7} {'skipped':>8} {'s':>6}")
        for folder in args.folders:
            start = time.perf_counter()
            outcome = run_folder(runner_classes[FOLDERS[folder]])
            seconds = time.perf_counter() - start
            counts = {k: len(v) for k, v in outcome.items()}
            results["folders"][folder] = {
                **counts,
                "seconds": round(seconds, 1),
                "failures": outcome["failed"],
                "skipped_by": collections.Counter(map(missing, outcome["skipped"].values())),
            }
            print(
                f"{folder:18} {sum(counts.values()):6d} {counts['passed']:7d} "
                f"{counts['failed']:7d} {counts['skipped']:8d} {seconds:6.1f}",
                flush=True,
            )
    print_missing(results["folders"])
    print_failures(results["folders"], every=args.failures)
    emit_json(results, args.json)


def print_missing(folders):
    """The skips grouped by what is missing, most frequent first, over every folder."""
    total = collections.Counter()
    for row in folders.values():
        total.update(row["skipped_by"])
    print(f"\nSkipped cases by what nnmem misses ({len(total)} causes)")
    for cause, count in total.most_common():
        where = ", ".join(f"{f} {r['skipped_by'][cause]}" for f, r in folders.items()
                          if cause in r["skipped_by"])  # fmt: skip
        print(f"  {count:4d}  {cause[:100]}  [{where}]")


def print_failures(folders, every):
    failures = [(f, name, why) for f, r in folders.items() for name, why in r["failures"].items()]
    print(f"\nFailed cases: {len(failures)}" + ("" if every or not failures else " (--failures)"))
    for folder, name, why in failures if every else []:
        print(f"  {folder}: {name}: {why[:160]}")


if __name__ == "__main__":
    main()
