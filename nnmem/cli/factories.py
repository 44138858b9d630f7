"""What nnmem train builds from its flags: the device (--device, --pool, --link-gbps, checked
against --budget), the model (--model, --depth) and the optimizer (--lr, --momentum,
--weight-decay). The training loop, the out-of-memory hints and the --timeline measurement all
build theirs here, so that each measures the model that trains.
"""

from nnmem import device, opt
from nnmem.cli.arguments import UsageError
from nnmem.memory import format_bytes
from nnmem.models import create_model


def create_device(args, dist=None):
    """The device --device names; one this machine cannot provide is a usage error. Under
    mpiexec (dist), the ranks of a node take its GPUs in turn (by local rank)."""
    if args.device == "cpu":
        try:
            dev = device.create_cpu_device(args.pool, link_gbps=args.link_gbps)
        except (MemoryError, ValueError) as e:  # NumPy cannot allocate (or index) that much
            if args.pool is None:  # the default pool (NNMEM_POOL_BYTES): not the flag's fault
                raise
            raise UsageError(
                f"argument --pool: cannot allocate {format_bytes(args.pool)} on this machine "
                f"({type(e).__name__}: {e}); give a smaller --pool, e.g. 2GiB"
            ) from None
    else:
        try:
            gpu = 0 if dist is None else dist.local_rank % max(device.get_num_gpus(), 1)
            dev = device.create_cuda_gpu_on(gpu, args.pool)
        except device.DeviceUnavailable as e:
            raise UsageError(
                f"argument --device: cuda is not available ({e}); use --device cpu"
            ) from None
    if args.budget is not None and args.budget > dev.pool.capacity:
        raise UsageError(
            f"argument --budget: {format_bytes(args.budget)} is more than the pool "
            f"({format_bytes(dev.pool.capacity)}); give a smaller --budget or a larger --pool"
        )
    return dev


def make_model(args, num_classes, num_channels):
    """The model the flags describe (new, uninitialised)."""
    return create_model(
        args.model, num_classes=num_classes, num_channels=num_channels, depth=args.depth
    )


def make_optimizer(args):
    return opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
