"""Memory: blocks, the pool allocator and its statistics."""

from nnmem.memory.block import Block, RecordingReadError, UnwrittenBlockError  # noqa: F401
from nnmem.memory.errors import OutOfMemory, TransferError  # noqa: F401
from nnmem.memory.pool import ALIGNMENT, FIT_POLICIES, Pool  # noqa: F401
from nnmem.memory.units import format_bytes, parse_bytes  # noqa: F401
