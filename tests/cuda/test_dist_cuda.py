"""DistOpt on the CUDA device (a GPU, or Numba's CUDA simulator), in MPI's one-rank world: the
gradients go through pinned host memory to the collective and back, and every number is the
wrapped optimizer's."""

import sys

import pytest
from cuda_testutil import needs_device

pytest.importorskip("mpi4py", reason="mpi4py is absent: pip install 'nnmem[mpi]'")

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from training import assert_identical, batches, train  # noqa: E402

from nnmem import device, opt  # noqa: E402
from nnmem.models import create_model  # noqa: E402

pytestmark = needs_device
DATA = batches((2, 1, 4, 4), 2)  # tiny: the simulator runs every thread in Python


def test_distopt_on_the_gpu_stages_through_the_host_and_changes_no_number():
    def run(optimizer=None):  # graph mode: the exchanges are recorded operations
        model = create_model("mlp", hidden=(8, 8))
        dev = device.create_cuda_gpu("64MiB")
        return train(model, DATA, True, optimizer=optimizer, dev=dev)

    dist = opt.DistOpt(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    assert_identical(run(), run(dist))
    assert dist._exchanges.staging  # the gradients went through pinned host arrays
