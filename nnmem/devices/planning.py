"""The planning device: a pool of offsets with no bytes behind them, where nothing runs.

A step recorded on it is planned exactly as on a real device, on shapes alone (see
nnmem.planning): every allocation and free happens, so its pool's statistics are what a real
pool would show, but no kernel runs and a host write only allocates. Operations size what they
allocate with kernels/sizes.py, and take their kernels from ``kernels`` by name only to hand
them to ``exec``, which runs nothing here: so its ``kernels`` are stand-ins (STAND_INS), and
it needs no module of kernels and compiles nothing. It plans a CPU's step unless told
``plans_for="cuda"``: the two size Conv2d's "auto" workspaces differently (ops/conv.py).
"""

import types

from nnmem.kernels import contract
from nnmem.memory.storage import NoStorage

from .base import Device
from .streams import Event, InlineStream


def _stand_in(name):
    """A function named like kernel `name` that refuses to run (a planning device has no bytes
    to run it on)."""

    def kernel(*arrays, **options):
        raise RuntimeError(f"{name}: a planning device runs no kernel")

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


#: A planning device's ``kernels``: every kernel of the contract (kernels/contract.py) as a
#: stand-in, and the contract's tables, which operations read as they build a step.
STAND_INS = types.SimpleNamespace(
    **contract.TABLES, **{name: _stand_in(name) for name in contract.KERNELS}
)


class PlanningDevice(Device):
    kind = "planning"
    kernels = STAND_INS
    runs_kernels = False

    def __init__(
        self, pool_bytes, policy="best_fit", name="planning", plans_for="cpu", link_gbps=None
    ):
        if plans_for not in ("cpu", "cuda"):
            raise ValueError(
                f"plans_for={plans_for!r}: a planning device plans for 'cpu' or 'cuda'"
            )
        super().__init__(pool_bytes, policy, name)
        self.compute_stream = self.copy_stream = InlineStream()
        self._plans_for = plans_for
        # the copy link the optimal planner's cost model assumes (graph/costs.py; None: its
        # default), as a CPU device's link_gbps throttles its copies
        self.link_gbps = link_gbps

    @property
    def plans_for(self):
        """The kind of device whose step it plans (Device.plans_for)."""
        return self._plans_for

    def _make_storage(self, capacity, alignment):
        return NoStorage(capacity, alignment)

    _make_host_storage = _make_storage

    def _write_from_host(self, tensor, write):
        pass  # the allocation was the point: there are no bytes to write

    def to_host(self, tensor, out=None):
        tensor.block.check_written()
        raise ValueError(
            f"a tensor of shape {tensor.shape} is on a planning device, which plans memory and "
            "computes no values; run the model on device.create_cpu_device() to read them"
        )

    def copy_tensor(self, dst, src):
        pass

    def create_stream(self):
        return InlineStream()

    def create_event(self):
        return Event()

    def copy_to_host_async(self, tensor, out, stream):
        pass

    def copy_from_host_async(self, tensor, host, stream):
        pass
