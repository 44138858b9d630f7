"""Optimizers: SINGA's update rules against NumPy references (eager and graph mode), learning
rate schedules, get_states / set_states, state keyed by identity."""

import math

import numpy as np
import pytest
import training

from nnmem import device, opt, tensor


def sgd_reference(w, grads, lr, momentum, dampening, weight_decay, nesterov):
    buf = np.zeros_like(w)
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def adam_reference(w, grads, lr, b1, b2, eps, weight_decay):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * w
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return w


def rmsprop_reference(w, grads, lr, rho, eps, weight_decay):
    """SINGA's RMSProp; lr(s) is the learning rate after s finished steps."""
    avg = np.zeros_like(w)
    for s, g in enumerate(grads):
        g = g + weight_decay * w
        avg = rho * avg + (1 - rho) * g * g
        w = w - lr(s) * g / np.sqrt(avg + eps)
    return w


def adagrad_reference(w, grads, lr, eps, weight_decay):
    """SINGA's AdaGrad; lr(s) is the learning rate after s finished steps."""
    history = np.zeros_like(w)
    for s, g in enumerate(grads):
        g = g + weight_decay * w
        history = history + g * g
        w = w - lr(s) * g / np.sqrt(history + eps)
    return w


def decayed(init, decay_steps, rate, staircase):
    """SINGA's ExponentialDecay as a function of the step count, written out independently."""
    if staircase:
        return lambda s: init * rate ** (s // decay_steps)
    return lambda s: init * rate ** (s / decay_steps)


def constant(value):
    return lambda s: value


def run(optimizer, w0, grads, dev=None):
    dev = dev or device.create_cpu_device("1MiB")
    p = tensor.Tensor(w0.shape, dev, tensor.float64, requires_grad=True, stores_grad=True)
    p.name = "w"
    p.copy_from_numpy(w0)
    for g in grads:
        optimizer.apply("w", p, tensor.from_numpy(g, dev))
        optimizer.step()
    return tensor.to_numpy(p)


rng = np.random.default_rng(3)
W0 = rng.standard_normal((4, 3))
GRADS = [rng.standard_normal((4, 3)) for _ in range(4)]


@pytest.mark.parametrize(
    "momentum,dampening,weight_decay,nesterov",
    [
        (0.0, 0.0, 0.0, False),
        (0.9, 0.0, 1e-2, False),
        (0.9, 0.1, 0.0, False),
        (0.8, 0.0, 1e-3, True),
    ],
)
def test_sgd_matches_singa_rule(momentum, dampening, weight_decay, nesterov):
    sgd = opt.SGD(
        lr=0.05,
        momentum=momentum,
        dampening=dampening,
        weight_decay=weight_decay,
        nesterov=nesterov,
    )
    np.testing.assert_allclose(
        run(sgd, W0, GRADS),
        sgd_reference(W0, GRADS, 0.05, momentum, dampening, weight_decay, nesterov),
        rtol=1e-12,
    )


def test_adam_matches_reference():
    adam = opt.Adam(lr=0.01, weight_decay=1e-3)
    np.testing.assert_allclose(
        run(adam, W0, GRADS), adam_reference(W0, GRADS, 0.01, 0.9, 0.999, 1e-8, 1e-3), rtol=1e-10
    )


def test_state_is_keyed_by_parameter_identity_not_name():
    dev = device.create_cpu_device("1MiB")
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    a = tensor.from_numpy(np.zeros(2), dev)
    b = tensor.from_numpy(np.zeros(2), dev)
    sgd.apply("same", a, tensor.from_numpy(np.ones(2), dev))
    sgd.apply("same", b, tensor.from_numpy(-np.ones(2), dev))
    assert len(sgd.moments) == 2
    np.testing.assert_allclose(tensor.to_numpy(a), -0.1)
    np.testing.assert_allclose(tensor.to_numpy(b), 0.1)


def test_nesterov_needs_momentum():
    with pytest.raises(ValueError, match="nesterov"):
        opt.SGD(lr=0.1, nesterov=True)


def test_optimizer_state_is_named_in_out_of_memory_reports():
    from nnmem.memory import OutOfMemory

    dev = device.create_cpu_device(4096)
    w = tensor.Tensor((256,), dev, requires_grad=True, stores_grad=True, name="fc.W")
    w.set_value(1.0)
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    sgd.state_of(w)
    with pytest.raises(OutOfMemory) as e:
        tensor.Tensor((4096,), dev).set_value(0)
    assert "SGD momentum of fc.W (256,) float32" in str(e.value)


# -- RMSProp and AdaGrad ---------------------------------------------------------------------
LR_SCHEDULES = {
    "constant": (0.05, constant(0.05)),
    "staircase": (opt.ExponentialDecay(0.05, 2, 0.5, staircase=True), decayed(0.05, 2, 0.5, True)),
    "smooth": (opt.ExponentialDecay(0.05, 3, 0.7), decayed(0.05, 3, 0.7, False)),
}


@pytest.mark.parametrize("schedule", LR_SCHEDULES)
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_rmsprop_matches_singa_rule(schedule, weight_decay):
    lr, lr_ref = LR_SCHEDULES[schedule]
    rmsprop = opt.RMSProp(lr=lr, rho=0.8, epsilon=1e-6, weight_decay=weight_decay)
    np.testing.assert_allclose(
        run(rmsprop, W0, GRADS),
        rmsprop_reference(W0, GRADS, lr_ref, 0.8, 1e-6, weight_decay),
        rtol=1e-12,
    )


@pytest.mark.parametrize("schedule", LR_SCHEDULES)
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_adagrad_matches_singa_rule(schedule, weight_decay):
    lr, lr_ref = LR_SCHEDULES[schedule]
    adagrad = opt.AdaGrad(lr=lr, epsilon=1e-6, weight_decay=weight_decay)
    np.testing.assert_allclose(
        run(adagrad, W0, GRADS),
        adagrad_reference(W0, GRADS, lr_ref, 1e-6, weight_decay),
        rtol=1e-12,
    )


def test_singa_defaults():
    rmsprop, adagrad = opt.RMSProp(), opt.AdaGrad()
    assert (rmsprop.lr, rmsprop.rho, rmsprop.epsilon, rmsprop.weight_decay) == (0.1, 0.9, 1e-8, 0)
    assert (adagrad.lr, adagrad.epsilon, adagrad.weight_decay) == (0.1, 1e-8, 0)
    np.testing.assert_allclose(
        run(opt.RMSProp(), W0, GRADS),
        rmsprop_reference(W0, GRADS, constant(0.1), 0.9, 1e-8, 0.0),
        rtol=1e-12,
    )


# -- graph mode: a replayed step follows the schedules ----------------------------------------
def train_on_gradients(optimizer, grads, use_graph):
    """W after one step per gradient, in eager or graph mode (the input is the gradient)."""
    w, _ = training.train_on_gradients(
        device.create_cpu_device("1MiB"), optimizer, W0, grads, use_graph
    )
    assert tensor.to_numpy(optimizer.step_counter).tolist() == [len(grads)]
    return w


STAIRCASE = decayed(0.05, 2, 0.5, True)
GRAPH_CASES = {
    "sgd": (
        lambda: opt.SGD(
            lr=opt.ExponentialDecay(0.05, 2, 0.5, staircase=True),
            momentum=opt.ExponentialDecay(0.9, 1, 0.8),
            weight_decay=1e-2,
        ),
        # SGD's rule with the momentum read at each step (0.9 * 0.8 ** s)
        lambda: sgd_scheduled_reference(W0, GRADS * 2, STAIRCASE, lambda s: 0.9 * 0.8**s, 1e-2),
    ),
    "adam": (
        lambda: opt.Adam(lr=opt.ExponentialDecay(0.05, 2, 0.5, staircase=True)),
        lambda: adam_scheduled_reference(W0, GRADS * 2, STAIRCASE),
    ),
    "rmsprop": (
        lambda: opt.RMSProp(lr=opt.ExponentialDecay(0.05, 2, 0.5, staircase=True)),
        lambda: rmsprop_reference(W0, GRADS * 2, STAIRCASE, 0.9, 1e-8, 0.0),
    ),
    "adagrad": (
        lambda: opt.AdaGrad(lr=opt.ExponentialDecay(0.05, 2, 0.5, staircase=True), epsilon=1e-7),
        lambda: adagrad_reference(W0, GRADS * 2, STAIRCASE, 1e-7, 0.0),
    ),
}


def sgd_scheduled_reference(w, grads, lr, momentum, weight_decay):
    buf = np.zeros_like(w)
    for s, g in enumerate(grads):
        g = g + weight_decay * w
        buf = momentum(s) * buf + g
        w = w - lr(s) * buf
    return w


def adam_scheduled_reference(w, grads, lr, b1=0.9, b2=0.999, eps=1e-8):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for s, g in enumerate(grads):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr(s) * (m / (1 - b1 ** (s + 1))) / (np.sqrt(v / (1 - b2 ** (s + 1))) + eps)
    return w


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("case", GRAPH_CASES)
def test_schedules_are_followed_in_eager_and_graph_mode(case, use_graph):
    make, reference = GRAPH_CASES[case]
    got = train_on_gradients(make(), GRADS * 2, use_graph)  # 8 steps: 4 drops of the rate
    np.testing.assert_allclose(got, reference(), rtol=1e-10)


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_rmsprop_and_adagrad_settings_changed_between_steps_reach_the_update(use_graph):
    for make, reference in [
        (opt.RMSProp, lambda lrs: rmsprop_reference(W0, GRADS, lrs.__getitem__, 0.9, 1e-8, 0)),
        (opt.AdaGrad, lambda lrs: adagrad_reference(W0, GRADS, lrs.__getitem__, 1e-8, 0)),
    ]:
        optimizer, lrs = make(lr=0.1), [0.1, 0.02, opt.ExponentialDecay(0.3, 1, 0.5), 0.01]
        dev = device.create_cpu_device("1MiB")
        m = training.GradientIsInput(W0)
        m.set_optimizer(optimizer)
        tx = tensor.PlaceHolder(W0.shape, dev, tensor.float64)
        m.compile([tx], is_train=True, use_graph=use_graph)
        for g, lr in zip(GRADS, lrs):
            optimizer.lr = lr
            tx.copy_from_numpy(g)
            m(tx)
        values = [0.1, 0.02, 0.3 * 0.5**2, 0.01]  # the schedule read at step 2
        np.testing.assert_allclose(tensor.to_numpy(m.scaled.W), reference(values), rtol=1e-12)


# -- schedules -------------------------------------------------------------------------------
def test_schedule_values_at_given_steps():
    assert [opt.Constant(0.3)(s) for s in (0, 1, 1000)] == [0.3, 0.3, 0.3]
    stairs = opt.ExponentialDecay(0.1, 10, 0.5, staircase=True)
    assert [stairs(s) for s in (0, 9, 10, 19, 25)] == [0.1, 0.1, 0.05, 0.05, 0.025]
    smooth = opt.ExponentialDecay(0.1, 10, 0.5)
    np.testing.assert_allclose(
        [smooth(s) for s in (0, 5, 10, 25)],
        [0.1, 0.1 * math.sqrt(0.5), 0.05, 0.1 * 0.5**2.5],
        rtol=1e-15,
    )
    # SINGA passes its step counter tensor, and gets a 1-element float32 tensor on its device
    cpu = device.create_cpu_device("1MiB")
    value = stairs(tensor.from_numpy(np.array([20], np.int32), cpu))
    assert value.device is cpu and value.dtype == np.float32
    assert tensor.to_numpy(value).tolist() == [np.float32(0.025)]
    assert opt.ExponentialDecay(2.0, 1, 0.0)(0) == 2.0 and opt.ExponentialDecay(2.0, 1, 0.0)(1) == 0


def test_schedules_refuse_what_the_kernels_cannot_evaluate():
    with pytest.raises(ValueError, match="decay_steps"):
        opt.ExponentialDecay(0.1, 0, 0.5)
    with pytest.raises(ValueError, match="decay_rate"):
        opt.ExponentialDecay(0.1, 10, -0.5)

    class Custom(opt.DecayScheduler):  # SINGA lets call(step) compute anything
        def call(self, step):
            return self.init_value / (1 + step)

    with pytest.raises(TypeError, match="subclass Constant or ExponentialDecay"):
        opt.SGD(lr=Custom(0.1))
    sgd = opt.SGD(lr=0.1)
    for bad in ("0.1", None, True):
        with pytest.raises(TypeError, match="lr must be a number or a DecayScheduler"):
            sgd.lr = bad
    assert sgd.lr == 0.1  # a refused value leaves the setting as it was
    sgd.lr = np.float32(0.5)
    assert sgd.lr == 0.5 and type(sgd.lr) is float


def test_hyperparameters_hold_schedules_as_the_kernels_take_them():
    sgd = opt.SGD(lr=opt.ExponentialDecay(0.1, 2, 0.5, staircase=True), momentum=0.9)
    hyper = dict(sgd.hyperparameters())
    assert hyper["lr"] == (0.1, 0.5, 2.0, True) and hyper["momentum"] == 0.9
    before = sgd.hyperparameters()
    sgd.lr = opt.Constant(0.1)
    assert sgd.hyperparameters() != before  # a CUDA graph captured with the old one is stale


def test_negative_momentum_or_weight_decay_is_refused_as_singa_does():
    with pytest.raises(ValueError, match="momentum must not be negative"):
        opt.SGD(momentum=-0.1)
    for make in (opt.SGD, opt.RMSProp, opt.AdaGrad, opt.Adam):
        with pytest.raises(ValueError, match="weight_decay must not be negative"):
            make(weight_decay=opt.ExponentialDecay(-1e-3, 1, 0.5))


# -- dtype -----------------------------------------------------------------------------------
def test_sgd_takes_singas_dtype():
    assert (
        opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-5, dtype=tensor.float32).dtype == np.float32
    )
    assert opt.SGD(0.1, 0.9, 1e-5, dtype=np.float16).dtype == np.float16  # SINGA's positional use
    assert opt.SGD(dtype="float64").dtype == np.float64
    assert opt.Adam().dtype == np.float32
    for bad in (tensor.int32, None, "float8", object):
        with pytest.raises(TypeError, match="dtype must be float32, float16 or float64") as e:
            opt.SGD(dtype=bad)
        assert "\n" not in str(e.value)


# -- get_states / set_states -----------------------------------------------------------------
OPTIMIZERS = {
    "sgd": lambda: opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda: opt.Adam(lr=0.01),
    "rmsprop": lambda: opt.RMSProp(lr=0.01),
    "adagrad": lambda: opt.AdaGrad(lr=0.05),
}
KINDS = {
    "sgd": ["moments"],
    "adam": ["m", "v"],
    "rmsprop": ["running_average"],
    "adagrad": ["history"],
}


class Params:
    """Two named parameters on a CPU device, updated by `optimizer` from given gradients."""

    def __init__(self, optimizer):
        self.dev = device.create_cpu_device("1MiB")
        self.optimizer = optimizer
        self.params = {}
        for name, value in (("fc.W", W0), ("fc.b", W0[0])):
            p = tensor.Tensor(value.shape, self.dev, tensor.float64, stores_grad=True, name=name)
            self.params[name] = p.copy_from_numpy(value)

    def steps(self, grads):
        for g in grads:
            for name, p in self.params.items():
                grad = g if name == "fc.W" else g[1]
                self.optimizer.apply(name, p, tensor.from_numpy(grad, self.dev))
            self.optimizer.step()
        return self

    def values(self):
        return {name: tensor.to_numpy(p) for name, p in self.params.items()}


def assert_states_equal(a, b):
    assert a.keys() == b.keys()
    assert a["step_counter"] == b["step_counter"]
    for kind in a.keys() - {"step_counter"}:
        assert a[kind].keys() == b[kind].keys(), kind
        for name in a[kind]:
            np.testing.assert_array_equal(a[kind][name], b[kind][name], err_msg=f"{kind}[{name}]")


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_get_states_has_singas_layout_and_round_trips_exactly(name):
    trained = Params(OPTIMIZERS[name]()).steps(GRADS[:3])
    states = trained.optimizer.get_states()
    assert sorted(states) == sorted(["step_counter", *KINDS[name]])
    assert states["step_counter"] == 3
    for kind in KINDS[name]:
        assert sorted(states[kind]) == ["fc.W", "fc.b"]
        assert states[kind]["fc.W"].shape == W0.shape
        assert np.any(states[kind]["fc.W"] != 0)
    # a fresh optimizer, before its first step: holds the states until the parameters come
    resumed = OPTIMIZERS[name]()
    resumed.set_states(states)
    assert_states_equal(resumed.get_states(), states)
    assert tensor.to_numpy(resumed.step_counter).tolist() == [3]
    resumed = Params(resumed)
    resumed.params = {k: p.copy_from_numpy(trained.values()[k]) for k, p in resumed.params.items()}
    resumed.steps(GRADS[3:])
    trained.steps(GRADS[3:])
    for k, v in trained.values().items():
        np.testing.assert_array_equal(resumed.values()[k], v, err_msg=k)
    assert_states_equal(resumed.optimizer.get_states(), trained.optimizer.get_states())
    # the same optimizer, later: back to the snapshot exactly
    trained.optimizer.set_states(states)
    assert_states_equal(trained.optimizer.get_states(), states)
    # and tensors are taken as well as arrays
    as_tensors = {
        k: v if k == "step_counter" else {n: tensor.from_numpy(a) for n, a in v.items()}
        for k, v in states.items()
    }
    trained.optimizer.set_states(as_tensors)
    assert_states_equal(trained.optimizer.get_states(), states)


def test_get_states_is_a_snapshot():
    trained = Params(OPTIMIZERS["adam"]()).steps(GRADS[:2])
    states = trained.optimizer.get_states()
    copy = {
        k: v if k == "step_counter" else {n: a.copy() for n, a in v.items()}
        for k, v in states.items()
    }
    trained.steps(GRADS[2:])
    assert_states_equal(states, copy)


def test_set_states_leaving_a_parameter_out_restarts_its_state_as_singas_does():
    trained = Params(OPTIMIZERS["rmsprop"]()).steps(GRADS[:2])
    states = trained.optimizer.get_states()
    del states["running_average"]["fc.b"]
    trained.optimizer.set_states(states)
    after = trained.optimizer.get_states()
    np.testing.assert_array_equal(after["running_average"]["fc.b"], 0)
    np.testing.assert_array_equal(
        after["running_average"]["fc.W"], states["running_average"]["fc.W"]
    )
    del states["running_average"]
    trained.optimizer.set_states(states)  # a state left out entirely is kept
    assert_states_equal(trained.optimizer.get_states(), after)


def bad_states(states):
    """(what is wrong, states, error, message) for each way set_states must refuse."""
    m, v = states["m"], states["v"]
    no_counter = {k: value for k, value in states.items() if k != "step_counter"}
    shape = r"m\['fc.b'\] has shape \(5,\), but that state has shape \(3,\)"
    return [
        ("shape", {**states, "m": {**m, "fc.b": np.zeros(5)}}, ValueError, shape),
        ("unknown", {**states, "moments": {}}, ValueError, r"unknown entries \['moments'\]"),
        ("no counter", no_counter, ValueError, "no step_counter"),
        ("negative counter", {**states, "step_counter": -1}, ValueError, "whole number"),
        ("fractional counter", {**states, "step_counter": 2.5}, ValueError, "whole number"),
        ("two counters", {**states, "step_counter": np.array([1, 2])}, ValueError, "one number"),
        ("a list", {**states, "v": {**v, "fc.W": [[0.0] * 3] * 4}}, TypeError, "is a list"),
        ("strings", {**states, "v": {**v, "fc.W": np.full((4, 3), "x")}}, TypeError, "real"),
        ("not a dict", {**states, "v": [1.0]}, TypeError, "v must be a dict"),
        ("nothing", None, TypeError, "must be a dict"),
    ]


def test_set_states_checks_everything_before_changing_anything():
    trained = Params(OPTIMIZERS["adam"]()).steps(GRADS[:2])
    before = trained.optimizer.get_states()
    # valid entries ahead of the bad one (step_counter, m["fc.W"]) must not be written either
    changed = {
        "step_counter": 7,
        "m": {name: a + 1 for name, a in before["m"].items()},
        "v": {name: a + 1 for name, a in before["v"].items()},
    }
    for what, states, error, message in bad_states(changed):
        with pytest.raises(error, match=message):
            trained.optimizer.set_states(states)
        assert_states_equal(trained.optimizer.get_states(), before)
        assert trained.optimizer.get_states()["step_counter"] == 2, what


def test_state_set_before_the_parameter_exists_is_checked_when_it_comes():
    adagrad = opt.AdaGrad(lr=0.1)
    adagrad.set_states({"step_counter": 1, "history": {"w": np.ones((2, 2))}})
    with pytest.raises(ValueError, match=r"history\['w'\] has shape \(2, 2\), but the parameter w"):
        run(adagrad, W0, GRADS[:1])
    assert adagrad.moments == {}


def test_states_need_unique_parameter_names():
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    dev = device.create_cpu_device("1MiB")
    a = tensor.from_numpy(np.zeros(2), dev)
    sgd.state_of(a)
    with pytest.raises(ValueError, match="has no name"):
        sgd.get_states()
    a.name = "same"
    b = tensor.from_numpy(np.zeros(2), dev)
    b.name = "same"
    sgd.state_of(b)
    with pytest.raises(ValueError, match="two parameters are named 'same'"):
        sgd.get_states()
