"""Run a tutorial notebook's code cells in order, in one namespace, without Jupyter.

    python tutorials/runner.py tutorials/01_model_api.ipynb [--save]

The test suite calls `run_notebook` on every tutorial: a cell that raises fails the test.
With --save, each code cell's printed output is stored in the notebook, so that a reader who
opens it on the web sees the results of the last run.
"""

import contextlib
import io
import json
import sys


def run_notebook(path, save=False):
    """Execute every code cell; return the list of printed outputs (one string per code cell)."""
    with open(path) as f:
        notebook = json.load(f)
    namespace = {"__name__": "__main__"}
    outputs = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(source, f"{path} cell {index}", "exec"), namespace)
        outputs.append(printed.getvalue())
        cell["outputs"] = (
            [
                {
                    "output_type": "stream",
                    "name": "stdout",
                    "text": printed.getvalue().splitlines(keepends=True),
                }
            ]
            if printed.getvalue()
            else []
        )
        cell["execution_count"] = len(outputs)
    if save:
        with open(path, "w") as f:
            json.dump(notebook, f, indent=1)
            f.write("\n")
    return outputs


if __name__ == "__main__":
    run_notebook(sys.argv[1], save="--save" in sys.argv)
