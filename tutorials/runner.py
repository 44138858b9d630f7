"""Run a tutorial notebook in a real Jupyter kernel, as a reader's `Run All` would.

    python tutorials/runner.py tutorials/01_model_api.ipynb          # print what each cell printed
    python tutorials/runner.py tutorials/01_model_api.ipynb --save   # and store the outputs

The notebook runs in a fresh IPython kernel (nbclient + ipykernel: `pip install -e
".[notebooks]"` or the `test` extra) with tutorials/ as its working folder. A cell that raises
stops the run with the cell's traceback. With --save, every output (printed text and figures)
is stored in the notebook, so that a reader who opens it on the web sees the last run's
results; the test suite (tests/test_tutorials.py) executes each notebook again and checks the
claims its text makes, in the fresh run and in the stored outputs.
"""

import argparse
import pathlib
import tempfile

#: Seconds one cell may run before the run is stopped (the slowest cell, a recomputation
#: search in tutorial 03, takes about a minute on a busy 2-core machine).
CELL_TIMEOUT_S = 600


def execute(path):
    """The notebook at `path`, executed (its outputs are the fresh run's; the file is not
    written)."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as e:
        raise ImportError(
            'running a notebook needs nbclient and ipykernel: pip install -e ".[notebooks]"'
        ) from e
    path = pathlib.Path(path)
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="nnmem-kernel-") as sockets:
        client = NotebookClient(
            notebook,
            timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            record_timing=False,  # no timestamps stored: a re-run changes only the outputs
            resources={"metadata": {"path": str(path.resolve().parent)}},
            config=_local_transport(sockets),
        )
        client.execute()
    return notebook


def _local_transport(folder):
    """The kernel manager's settings: talk to the kernel over Unix sockets in `folder`.

    Jupyter's default transport is TCP on localhost, and ipykernel then warns on stderr that
    anyone on the machine could read the traffic ("Kernel is running over TCP without
    encryption"). The kernel here is this process's child and never leaves the machine, so
    Unix sockets (ZeroMQ's "ipc" transport), which the warning itself recommends, are the right
    channel: files in a private temporary folder (mode 0700), gone when the run ends. Where
    ZeroMQ has no ipc transport (some Windows builds), TCP and its warning remain.
    """
    import zmq
    from traitlets.config import Config

    config = Config()
    if zmq.has("ipc"):
        config.KernelManager.transport = "ipc"
        # the sockets are the files `<ip>-<port>`; without an explicit path they would land in
        # the kernel's working folder, tutorials/
        config.KernelManager.ip = str(pathlib.Path(folder) / "kernel")
    return config


def printed(cell):
    """The text a code cell printed (standard output), as one string."""
    return "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )


def figures(cell):
    """How many images (PNG) a code cell displayed."""
    return sum("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


def run_notebook(path, save=False):
    """Execute every code cell in a kernel; return the list of printed outputs (one string per
    code cell). With save, write the notebook back with its outputs."""
    notebook = execute(path)
    if save:
        import nbformat

        nbformat.write(notebook, path)
    return [printed(cell) for cell in notebook.cells if cell.cell_type == "code"]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python tutorials/runner.py",
        description="Run a tutorial notebook in a Jupyter kernel and print each code cell's "
        "printed output.",
    )
    parser.add_argument("notebook", type=pathlib.Path, help="the .ipynb file to run")
    parser.add_argument(
        "--save", action="store_true", help="store the outputs (figures too) in the notebook"
    )
    args = parser.parse_args(argv)
    if args.notebook.suffix != ".ipynb" or not args.notebook.is_file():
        parser.error(f"{str(args.notebook)!r} is not a notebook file (.ipynb)")
    for index, text in enumerate(run_notebook(args.notebook, save=args.save)):
        print(f"--- code cell {index + 1}")
        print(text, end="" if text.endswith("\n") or not text else "\n")


if __name__ == "__main__":
    main()
