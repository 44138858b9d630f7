"""``python -m nnmem.cli``: the command line, as the ``nnmem`` command runs it."""

import sys

from nnmem.cli import main

sys.exit(main())
