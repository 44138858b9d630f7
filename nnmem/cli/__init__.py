"""The command line, two commands: `nnmem train` trains a zoo model and reports its memory per
epoch; `nnmem plan` plans a training step's memory on shapes alone, before running it.

A mistake a user can make (a bad flag, a missing file, a pool too small, a run that diverges)
is answered without a traceback: one line saying what is wrong and how to fix it, or, for an
out-of-memory error, the pool's report and the --pool value that fits. Ctrl-C stops a command
with one line too, and exit status 130 (128 + SIGINT), as a shell reports it.

``python -m nnmem`` runs the same command line as ``nnmem``.
"""

import argparse
import copy
import sys

from nnmem.cli import plan, train
from nnmem.cli.arguments import UsageError
from nnmem.cli.hints import Fix
from nnmem.communicator import DistributedError
from nnmem.memory import OutOfMemory
from nnmem.version import __version__

#: The exit status of a command stopped by Ctrl-C: 128 + SIGINT (2), what a shell reports.
INTERRUPTED = 130


class HelpFormatter(argparse.HelpFormatter):
    """--help's layout: each option ends with its default, "(default: 10)", unless its help
    already says what it is, or there is none to show (a switch that is off, a value worked
    out when the flag is left out). argparse's ArgumentDefaultsHelpFormatter does this only
    for options that have a help text."""

    def _format_action(self, action):
        default = action.default
        if (
            action.option_strings
            and default is not None
            and default is not False
            and default != argparse.SUPPRESS
            and "default" not in (action.help or "")
        ):
            action = copy.copy(action)  # the parser's own action keeps its help as written
            action.help = f"{action.help or ''} (default: %(default)s)".lstrip()
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line: the message without the usage block above it
    (the usage is one --help away), and defaults in --help (HelpFormatter). The sub-commands'
    parsers are of this class too."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    """The parser of `nnmem` and of its commands (each command's module adds its own)."""
    parser = Parser(prog="nnmem", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--version", action="version", version=f"nnmem {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train.add_parser(commands)
    plan.add_parser(commands)
    return parser


def main(argv=None):
    """Run `nnmem` with the arguments `argv` (default: sys.argv[1:]); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help or --version (0), or a bad flag argparse explained (2)
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
    further up added on its way), one per line. An out-of-memory error whose notes hold fixes
    in the command's flags (hints.Fix: the --pool that fits, the nnmem plan command of the
    step) shows the pool's report and those fixes only: the error's own advice and the other
    notes give it in Python's terms, which a command-line user cannot follow."""
    notes = getattr(error, "__notes__", [])
    fixes = [note for note in notes if isinstance(note, Fix)]
    if isinstance(error, OutOfMemory) and fixes:
        first, *report = error.report()
        lines = [f"nnmem {command}: {type(error).__name__}: {first}", *report, "How to fix it:"]
        return "\n".join(lines + [f"  - {fix}" for fix in fixes])
    return "\n".join([f"nnmem {command}: {type(error).__name__}: {error}", *notes])
