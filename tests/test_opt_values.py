"""SINGA's read-only views of an optimizer's settings (opt.SGD(...).lr_value, mom_value, ...)
and of a tensor's values (t.data.GetFloatValue(n)), which SINGA's own tests read."""

import numpy as np
import pytest

from nnmem import opt, tensor


def value(t):
    assert t.shape == (1,) and t.dtype == np.float32
    return float(tensor.to_numpy(t)[0])


def test_lr_value_follows_the_schedule_as_steps_are_taken():
    sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, 2, 0.5, staircase=True), momentum=0.9)
    seen = []
    for _ in range(5):
        seen.append(value(sgd.lr_value))
        sgd.step()  # before any update: counted all the same
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-6)
    assert sgd.get_states()["step_counter"] == 5
    assert value(sgd.mom_value) == pytest.approx(0.9)
    assert value(sgd.dam_value) == 0 and value(sgd.decay_value) == 0


def test_each_optimizer_has_singas_value_names_and_no_others():
    adam = opt.Adam(lr=0.01, beta_1=0.8)
    assert value(adam.beta_1_value) == pytest.approx(0.8)
    assert value(opt.RMSProp(rho=0.7).rho_value) == pytest.approx(0.7)
    with pytest.raises(AttributeError, match="mom_value"):
        adam.mom_value  # Adam has no momentum
    with pytest.raises(AttributeError, match="lr_valeu"):
        adam.lr_valeu


def test_get_float_value_reads_the_first_n_values():
    t = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(t.data.GetFloatValue(4), [0, 1, 2, 3])
    assert t.GetIntValue(6).dtype == np.int32
    with pytest.raises(ValueError, match="0 to size"):
        t.GetFloatValue(7)
