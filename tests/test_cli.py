"""nnmem train: runs, reports per epoch, and answers bad input without a traceback."""
import json
import re

from nnmem.cli import main


def test_train_reports_each_epoch(capsys):
    assert main(["train", "--epochs", "2", "--max-batches", "3", "--batch-size", "32"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if l.startswith("epoch ")]
    assert len(lines) == 2
    for line in lines:
        assert re.search(r"loss \d+\.\d+  test accuracy 0\.\d+  \d+ images/s  peak pool memory "
                         r"\d+\.\d MiB", line), line


def test_train_mlp_eagerly(capsys):
    assert main(["train", "--model", "mlp", "--epochs", "1", "--max-batches", "2",
                 "--no-graph"]) == 0
    assert "mlp on digits" in capsys.readouterr().out


def test_timeline_plot(capsys, tmp_path):
    png = tmp_path / "timeline.png"
    assert main(["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1",
                 "--timeline", str(png)]) == 0
    out = capsys.readouterr().out
    for label in ("no recycling", "eager", "graph (BFS)", "static plan: arena"):
        assert label in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "timeline.json").read_text())
    labels = [t["label"] for t in data["timelines"]]
    assert labels == ["no recycling", "eager", "graph (BFS)"]
    graph = data["timelines"][2]
    assert len(graph["bytes"]) == len(graph["names"]) == len(graph["live"])
    assert max(graph["bytes"]) >= data["lower_bound_bytes"] > 0


def test_bad_input_is_explained(capsys):
    assert main(["train", "--data", "imagenet"]) == 2
    assert "digits" in capsys.readouterr().err
    assert main(["train", "--pool", "lots"]) == 2
    assert "512MiB" in capsys.readouterr().err
    assert main(["train", "--pool", "1MiB", "--max-batches", "1", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "OutOfMemory" in err and "parameter" in err
