"""Shared test settings: Hypothesis without deadlines (JIT compilation is slow the first time),
and autograd's training flag restored after every test."""

import pytest
from hypothesis import settings

from nnmem import autograd

settings.register_profile("nnmem", deadline=None)
settings.load_profile("nnmem")


@pytest.fixture(autouse=True)
def _restore_training_flag():
    previous = autograd.training
    yield
    autograd.training = previous
