"""What nnmem train builds from its flags: the device (--device, --pool, --link-gbps, checked
against --budget), the model (--model, --depth: only a model that some data set --data loads
is large enough for) and the optimizer (--lr, --momentum, --weight-decay). The training loop,
the out-of-memory hints and the --timeline measurement all build theirs here, so that each
measures the model that trains.
"""

import argparse

from nnmem import device, opt
from nnmem.cli import flags
from nnmem.cli.arguments import UsageError, format_shape
from nnmem.memory import format_bytes
from nnmem.models import MODELS, create_model


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


def _large_enough_data(model):
    """Can some data set --data loads feed `model` (flags.image_too_small)?"""
    return any(flags.image_too_small(model, s) is None for s in flags.DATA_SAMPLES.values())


#: The zoo's models that some data set --data loads is large enough for; nnmem plan plans all.
TRAINABLE = sorted(m for m in MODELS if _large_enough_data(m))


def trainable_model(name):
    """--model: a model of the zoo that some loadable data set is large enough for (argparse
    then checks it is one of TRAINABLE); one that none is large enough for is refused with
    its smallest image and what to do instead."""
    if name in MODELS and not _large_enough_data(name):
        loadable = ", ".join(f"{d} {format_shape(s)}" for d, s in flags.DATA_SAMPLES.items())
        raise argparse.ArgumentTypeError(
            f"{name} needs images of at least {flags.SMALLEST_IMAGE[name]}x"
            f"{flags.SMALLEST_IMAGE[name]} (its paper used "
            f"{format_shape(flags.PAPER_SAMPLES[name])}), and none of the data sets --data "
            f"loads is that large ({loadable}): train another --model, or plan {name}'s memory "
            f"with nnmem plan --model {name}"
        )
    return name


def check_image_size(model, data, sample):
    """Refuse, before building anything, a model whose pooling would shrink the images of
    --data to nothing (VGG-16 on 28x28 digits), saying which --data fits it (--model offers
    only models that some data set fits: TRAINABLE)."""
    smallest = flags.image_too_small(model, sample)
    if smallest is None:
        return
    large_enough = " or ".join(
        f"--data {name} ({format_shape(s)} images)"
        for name, s in flags.DATA_SAMPLES.items()
        if min(s[1:]) >= smallest
    )
    raise UsageError(
        f"argument --model: {model} needs images of at least {smallest}x{smallest} (its paper "
        f"used {format_shape(flags.PAPER_SAMPLES[model])}), and {data} holds "
        f"{format_shape(sample)} ones; use {large_enough}"
    )


def make_model(args, num_classes, num_channels):
    """The model the flags describe (new, uninitialised; an ONNX file's with its weights)."""
    if args.onnx_model is not None:
        return args.onnx_model.create()
    return create_model(
        args.model, num_classes=num_classes, num_channels=num_channels, depth=args.depth
    )


def make_optimizer(args):
    return opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
