"""How much the property tests checked: random operations by kind, counted by the state machines
and printed at the end of the run (tests/conftest.py), so that a run, deep or not, says what it
did rather than how long it took.

The mutation tests (tests/test_property_mutants.py) leave the figures as they found them: their
operations run broken copies of the code and check nothing about nnmem."""

from collections import Counter

COUNTS = Counter()


def count(kind, n=1):
    """Add `n` operations of `kind` (e.g. "pool operations") to this run's figures."""
    COUNTS[kind] += n
