"""One training step's memory, technique by technique, measured on a throwaway copy.

``measure_step(make_model, x, y)`` builds fresh models from `make_model` (same seed, so the
same parameters) on fresh devices, runs one warm-up step (optimizer state appears on the
first step) and then one measured step each way:
- "no recycling": eager, with the device's recycling switched off (every block kept until the
  step ends: the baseline);
- "eager": blocks freed as soon as nothing refers to them;
- "graph": the compiled step's timeline, from its arena layout.
It returns the three Timelines and the compiled step's memory summary, whose
"lower_bound_bytes" is the graph Timeline's ``lower_bound`` (one figure, memory/timeline.py).
The graph's Timeline carries the plan's tensors (``timeline.tensors``, for the memory viewer).
With ``recompute="cost-aware"`` (or "speed", "memory") a fourth, "recompute": the same
compiled step replanned with recomputation, on the same device (so with the same
convolution workspaces: a plan on a planning device may size them otherwise).

``measure_lanes(make_model, x, y, offload)`` runs a graph step that offloads, with vDNN's
synchronous engine and with the asynchronous one, and returns each step's compute and copy
lanes (when each call ran) with the planned memory timeline of the step.
"""

import numpy as np

from nnmem import device, opt, tensor
from nnmem.memory.timeline import Timeline


def _new_device(pool_bytes, link_gbps=None):
    # policy given: a new device even when pool_bytes is None (create_cpu_device() alone is
    # the default device, which the caller's own model, and the models measured before this
    # one, may still hold blocks of: they would count in this step's persistent bytes)
    return device.create_cpu_device(pool_bytes, policy="best_fit", link_gbps=link_gbps)


def _trained_model(dev, make_model, x, y, use_graph, seed, **compile_options):
    """(model, tx, ty) on `dev`, after a warm-up step."""
    dev.SetRandSeed(seed)
    model = make_model()
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.PlaceHolder(x.shape, dev)
    ty = tensor.PlaceHolder(y.shape, dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=use_graph, **compile_options)
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(np.asarray(y, np.int32))
    model(tx, ty)  # warm-up: momentum buffers, recording
    return model, tx, ty


def measure_step(make_model, x, y, pool_bytes=None, seed=0, recompute=None):
    """{label: Timeline} for one step with no recycling, eager and graph (and "recompute", with
    a `recompute` policy); and the compiled step's memory summary (without recomputation)."""
    timelines = {}
    for label, recycle in (("no recycling", False), ("eager", True)):
        dev = _new_device(pool_bytes)
        with dev.recycling(recycle):
            model, tx, ty = _trained_model(dev, make_model, x, y, False, seed)
            with dev.sampling_memory() as samples:
                model(tx, ty)
        timelines[label] = Timeline.from_samples(label, samples)
    model, tx, ty = _trained_model(_new_device(pool_bytes), make_model, x, y, True, seed)
    compiled = model.compiled_step(tx, ty)
    timelines["graph"] = compiled.timeline
    compiled.timeline.tensors = compiled.live_tensors()
    summary = compiled.memory_summary()
    if recompute is not None:
        compiled.replan(compiled.sequential, recompute)
        compiled.timeline.label = f"graph + recompute ({recompute})"
        compiled.timeline.tensors = compiled.live_tensors()
        timelines["recompute"] = compiled.timeline
    return timelines, summary


def measure_lanes(make_model, x, y, offload, pool_bytes=None, seed=0, link_gbps=None):
    """({"sync": lanes, "async": lanes}, planned Timeline): one traced step each way
    (TransferEngine.lanes(): (lane, name, start, end) in seconds), after two warm-up steps."""
    lanes = {}
    for label, asynchronous in (("sync", False), ("async", True)):
        model, tx, ty = _trained_model(
            _new_device(pool_bytes, link_gbps),
            make_model,
            x,
            y,
            True,
            seed,
            offload=offload,
            async_offload=asynchronous,
        )
        compiled = model.compiled_step(tx, ty)
        model(tx, ty)  # the first replay compiles kernels: not what a step costs
        compiled.trace_transfers()
        model(tx, ty)
        lanes[f"{label} offload ({offload})"] = compiled.engine.lanes()
    compiled.timeline.label = f"graph + offload ({offload})"
    compiled.timeline.tensors = compiled.live_tensors()
    return lanes, compiled.timeline
