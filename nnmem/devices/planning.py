"""The planning device: a pool of offsets with no bytes behind them, where nothing runs.

A step recorded on it is planned exactly as on a real device, on shapes alone (see
nnmem.planning): every allocation and free happens, so its pool's statistics are what a real
pool would show, but no kernel runs and a host write only allocates. Its ``kernels`` are the
CPU's, for their shape functions (conv2d_output_shape, ...): operations read them when they
build a step, and never call a kernel here. It plans a CPU's step unless told
``plans_for="cuda"``: the two size Conv2d's "auto" workspaces differently (ops/conv.py).
"""

from nnmem.kernels import cpu as cpu_kernels
from nnmem.memory.storage import NoStorage

from .base import Device
from .streams import Event, InlineStream


class PlanningDevice(Device):
    kind = "planning"
    kernels = cpu_kernels
    runs_kernels = False

    def __init__(self, pool_bytes, strategy="best_fit", name="planning", plans_for="cpu"):
        if plans_for not in ("cpu", "cuda"):
            raise ValueError(
                f"plans_for={plans_for!r}: a planning device plans for 'cpu' or 'cuda'"
            )
        super().__init__(pool_bytes, strategy, name)
        self.compute_stream = self.copy_stream = InlineStream()
        self._plans_for = plans_for

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
            f"{tensor!r} is on a planning device, which plans memory and computes no values; "
            "run the model on device.create_cpu_device() to read them"
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
