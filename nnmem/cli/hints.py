"""What nnmem train adds to an out-of-memory error, as fixes in its own flags: the --pool (or
--budget) this run fits in, measured by planning the same step, and the nnmem plan command that
writes the memory viewer of that step, to see which tensors are live at its peak. The command
line prints them under the pool's report (OutOfMemory.report), in place of the error's advice
in Python's terms (a create_cpu_device pool, a placeholder nnmem plan command).

Both are planned, never run: a planning device records every allocation and runs no kernel, so
a hint cannot run out of memory itself.
"""

import math

from nnmem.cli.arguments import format_shape
from nnmem.cli.factories import make_model, make_optimizer
from nnmem.memory import format_bytes
from nnmem.planning import smallest_pool


class Fix(str):
    """A note of an out-of-memory error that is a fix in the command's flags, filled in with
    this run's values. Where an error has some, the command line shows them as its only advice:
    the error's own (OutOfMemory.advice) and the notes library code added speak of Python
    arguments (pool_bytes=..., compile(..., offload=...)) that a command-line user cannot pass."""


def pool_hint(args, sample, num_classes):
    """The note an out-of-memory error gets on the command line: a pool this run fits in, as a
    --pool value (or a --budget), measured on a planning device (every allocation, no kernel).
    With --offload in graph mode, the pool of that policy ("dyn" had tried them all: "all",
    the smallest), and with --recompute, of that policy. A Fix."""
    offload = {"none": "none", "conv": "conv"}.get(args.offload, "all")
    offloading = offload != "none" and not args.no_graph
    needed = smallest_pool(
        make_model(args, num_classes, sample[0]),
        (args.batch_size,) + sample,
        use_graph=not args.no_graph,
        recompute=args.recompute,
        optimizer=make_optimizer(args),
        plans_for=args.device,
        offload=offload,
    )
    mib = math.ceil(needed / 2**20)
    if args.budget is not None:
        if args.offload != "none" and args.no_graph:
            return Fix(
                f"eagerly, {args.model} at batch {args.batch_size} needs "
                f"{format_bytes(needed)} ({needed} bytes) with nothing moved to the host; "
                f"below that the tensor cache moves tensors out, and --budget was too small even "
                f"so: rerun with a larger --budget (at most {mib}MiB), or a smaller --batch-size"
            )
        if offloading:
            return Fix(
                f"with --offload {offload}, {args.model} at batch "
                f"{args.batch_size} needs {format_bytes(needed)} ({needed} bytes): rerun with "
                f"--budget {mib}MiB, or with a smaller --batch-size"
            )
        return Fix(
            f"without offloading, {args.model} at batch {args.batch_size} needs "
            f"{format_bytes(needed)} ({needed} bytes): rerun with --budget {mib}MiB, with "
            "--offload all, or with a smaller --batch-size"
        )
    return Fix(
        f"{args.model} at batch {args.batch_size} fits in a pool of "
        f"{format_bytes(needed)} ({needed} bytes): rerun with --pool {mib}MiB, or with a "
        "smaller --batch-size"
    )


def viewer_hint(args, sample, num_classes):
    """The note that says how to see the tensors live at this step's peak: the nnmem plan
    command of this run's step, which writes its memory viewer (planned: nnmem plan runs
    nothing, so it cannot run out of memory). A Fix."""
    if args.onnx_model is not None:  # the graph fixes the classes
        flags = args.onnx
    else:
        flags = f"--model {args.model}"
        if args.model == "resnet":
            flags += f" --depth {args.depth}"
        if num_classes != 10:
            flags += f" --num-classes {num_classes}"
    flags += f" --batch {args.batch_size} --input {format_shape(sample)}"
    if args.recompute != "none":  # (left out, the plan's recompute rows are cost-aware)
        flags += f" --recompute {args.recompute}"
    if args.offload != "none":  # (left out, the plan shows the offloading rows as well)
        flags += f" --offload {args.offload}"
    if args.budget is not None:  # the plan says which technique fits it
        flags += f" --budget {args.budget}"
    return Fix(
        "to see which tensors are live at the peak and where the plan puts them, write the "
        f"memory viewer and open it in a browser: nnmem plan {flags} --timeline oom.html"
    )
