"""Memory: blocks, the pool allocator and its statistics."""
from nnmem.memory.block import Block, RecordingReadError, UnwrittenBlockError  # noqa: F401
from nnmem.memory.errors import OutOfMemory  # noqa: F401
from nnmem.memory.pool import ALIGNMENT, STRATEGIES, Pool  # noqa: F401
from nnmem.memory.units import format_bytes, parse_bytes  # noqa: F401


def __getattr__(name):
    # nnmem.memory.plan(model, input_shape, ...) plans a model's step; it lives in
    # nnmem.planning (it builds models and graphs, which sit above this package).
    if name == "plan":
        from nnmem.planning import plan
        return plan
    raise AttributeError(f"module 'nnmem.memory' has no attribute {name!r}")
