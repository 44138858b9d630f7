"""The command line, two commands: `nnmem train` trains a zoo model and reports its memory per
epoch; `nnmem plan` plans a training step's memory on shapes alone, before running it.

A mistake a user can make (a bad flag, a missing file, a pool too small, a run that diverges)
is answered without a traceback: one line saying what is wrong and how to fix it, or, for an
out-of-memory error, the pool's report and the --pool value that fits. Ctrl-C stops a command
with one line too, and exit status 130 (128 + SIGINT), as a shell reports it.
"""

import argparse
import sys

from nnmem.cli import plan, train
from nnmem.cli.arguments import UsageError
from nnmem.communicator import DistributedError

#: The exit status of a command stopped by Ctrl-C: 128 + SIGINT (2), what a shell reports.
INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line: the message without the usage block above it
    (the usage is one --help away). The sub-commands' parsers are of this class too."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv=None):
    """Run `nnmem` with the arguments `argv` (default: sys.argv[1:]); return the exit status."""
    parser = Parser(prog="nnmem", description=__doc__.split("\n\n")[0].replace("\n", " "))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train.add_parser(commands)
    plan.add_parser(commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0), or a bad flag argparse has already explained (2)
        return e.code
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print(f"nnmem {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except UsageError as e:
        print(f"nnmem {args.command}: error: {e}", file=sys.stderr)
    except (
        ValueError,
        TypeError,
        FloatingPointError,
        MemoryError,
        OSError,
        DistributedError,  # under mpiexec: another rank failed or stopped
    ) as e:
        print(explain(args.command, e), file=sys.stderr)
    return 2


def explain(command, error):
    """The error as the user sees it: its type and message, then its notes (hints that code
    further up added on its way, e.g. "rerun with --pool 24MiB"), one per line."""
    lines = [f"nnmem {command}: {type(error).__name__}: {error}"]
    lines += getattr(error, "__notes__", [])
    return "\n".join(lines)
