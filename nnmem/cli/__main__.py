import sys

from nnmem.cli import main

sys.exit(main())
