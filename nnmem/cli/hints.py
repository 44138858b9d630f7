"""What nnmem train adds to an out-of-memory error, below the pool's own report: the --pool (or
--budget) this run fits in, measured by planning the same step, and the nnmem plan command that
writes the memory viewer of that step, to see which tensors are live at its peak.

Both are planned, never run: a planning device records every allocation and runs no kernel, so
a hint cannot run out of memory itself.
"""

import math

from nnmem.cli.arguments import format_shape
from nnmem.cli.factories import make_model, make_optimizer
from nnmem.memory import format_bytes
from nnmem.planning import smallest_pool


def pool_hint(args, sample, num_classes):
    """The note an out-of-memory error gets on the command line: a pool this run fits in, as a
    --pool value (or a --budget), measured on a planning device (every allocation, no kernel).
    With --offload in graph mode, the pool of that policy ("dyn" had tried them all: "all",
    the smallest)."""
    offload = {"none": "none", "conv": "conv"}.get(args.offload, "all")
    offloading = offload != "none" and not args.no_graph
    needed = smallest_pool(
        make_model(args, num_classes, sample[0]),
        (args.batch_size,) + sample,
        use_graph=not args.no_graph,
        optimizer=make_optimizer(args),
        plans_for=args.device,
        offload=offload,
    )
    mib = math.ceil(needed / 2**20)
    if args.budget is not None:
        if args.offload != "none" and args.no_graph:
            return (
                f"nnmem train: eagerly, {args.model} at batch {args.batch_size} needs "
                f"{format_bytes(needed)} ({needed} bytes) with nothing moved to the host; "
                f"below that the tensor cache moves tensors out, and --budget was too small even "
                f"so: rerun with a larger --budget (at most {mib}MiB), or a smaller --batch-size"
            )
        if offloading:
            return (
                f"nnmem train: with --offload {offload}, {args.model} at batch "
                f"{args.batch_size} needs {format_bytes(needed)} ({needed} bytes): rerun with "
                f"--budget {mib}MiB, or with a smaller --batch-size"
            )
        return (
            f"nnmem train: without offloading, {args.model} at batch {args.batch_size} needs "
            f"{format_bytes(needed)} ({needed} bytes): rerun with --budget {mib}MiB, with "
            "--offload all, or with a smaller --batch-size"
        )
    return (
        f"nnmem train: {args.model} at batch {args.batch_size} fits in a pool of "
        f"{format_bytes(needed)} ({needed} bytes): rerun with --pool {mib}MiB, or with a "
        "smaller --batch-size"
    )


def viewer_hint(args, sample, num_classes):
    """The note that says how to see the tensors live at this step's peak: the memory viewer
    of the same step, planned (nnmem plan runs nothing, so it cannot run out of memory)."""
    depth = f" --depth {args.depth}" if args.model == "resnet" else ""
    classes = "" if num_classes == 10 else f" --num-classes {num_classes}"
    return (
        f"nnmem train: to see which tensors are live at the peak and where the plan puts them, "
        f"write the memory viewer and open it in a browser: nnmem plan --model {args.model}"
        f"{depth}{classes} --batch {args.batch_size} --input {format_shape(sample)} "
        "--timeline oom.html"
    )
