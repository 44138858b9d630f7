"""The command line: ``nnmem train`` (later ``nnmem plan``, ``nnmem bench``)."""
import argparse
import sys

from nnmem.cli import plan, train


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nnmem", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train.add_parser(commands)
    plan.add_parser(commands)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, MemoryError, OSError) as e:
        # Bad input is answered with the error's own explanation, not a traceback.
        print(f"nnmem {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
