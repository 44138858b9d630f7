"""``python -m nnmem``: the command line, as the ``nnmem`` command runs it (see nnmem.cli)."""

import sys

from nnmem.cli import main

sys.exit(main())
