"""nnmem train under mpiexec (data parallelism, see nnmem.dist_opt): the flags of a run of
several processes, their checks, and the DistOpt each rank trains with.
"""

import numba

from nnmem import opt
from nnmem.cli import arguments
from nnmem.cli.arguments import UsageError
from nnmem.cli.factories import make_optimizer
from nnmem.communicator import DEFAULT_TIMEOUT_S
from nnmem.dist_opt import DIST_OPTIONS


def dist_flags(p):
    """Data-parallel training, for a run started by mpiexec (see nnmem.dist_opt)."""
    p.add_argument(
        "--dist-option",
        default=None,
        choices=list(DIST_OPTIONS),
        help="under mpiexec: how the ranks exchange gradients, plain (float32), half (float16 "
        "on the wire), sparseTopK or sparseThreshold (with --spars); default plain",
    )
    p.add_argument(
        "--spars",
        type=arguments.positive_float,
        default=None,
        help="with --dist-option sparseTopK: the fraction of each gradient sent (default "
        "0.05); sparseThreshold: the smallest magnitude sent",
    )
    p.add_argument(
        "--dist-timeout",
        type=arguments.positive_float,
        default=None,
        help="under mpiexec: seconds a rank waits for the others in one exchange before the "
        f"job stops with an error (default {DEFAULT_TIMEOUT_S:g})",
    )


def check_dist_flags(args, world_size):
    """One-line errors for distributed flags that cannot apply."""
    given = [
        f
        for f, v in (
            ("--dist-option", args.dist_option),
            ("--spars", args.spars),
            ("--dist-timeout", args.dist_timeout),
        )
        if v is not None
    ]
    if given and world_size == 1:
        raise UsageError(
            f"argument {given[0]}: it sets how the processes of a data-parallel run exchange "
            "gradients, and this run is one process; launch it with mpiexec -n 2 nnmem train ..."
        )
    if args.spars is not None and args.dist_option not in ("sparseTopK", "sparseThreshold"):
        raise UsageError(
            "argument --spars: it sets the sparsification; add --dist-option sparseTopK or "
            "sparseThreshold"
        )
    if args.dist_option == "sparseTopK" and args.spars is not None and args.spars > 1:
        raise UsageError(
            "argument --spars: with sparseTopK it is the fraction sent, in (0, 1]; got "
            f"{args.spars:g}"
        )


def create_dist_opt(args):
    """The DistOpt of a run mpiexec started: each rank trains on its shard of the data with
    the batch --batch-size, on its share of the node's cores, and only rank 0 prints."""
    try:
        dist = opt.DistOpt(
            make_optimizer(args),
            dist_option=args.dist_option or "plain",
            spars=0.05 if args.spars is None else args.spars,
            timeout=DEFAULT_TIMEOUT_S if args.dist_timeout is None else args.dist_timeout,
        )
    except ImportError as e:
        raise UsageError(f"mpiexec started this run, but {e}") from None
    # N ranks on one node, each with every core, would run N times too many threads.
    numba.set_num_threads(max(1, numba.config.NUMBA_NUM_THREADS // dist.communicator.local_size))
    return dist
