"""What the conv-layer points compute on and how their launches are priced: each layer's input
maps (generated or saved), its im2col GEMM operands, and the cost model's time of a list of
trace records. Shared by the forward GEMMs (``dense_layers``) and the training step
(``training``)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from spartan_py.costmodel.families import LIST_TILES
from spartan_py.costmodel.machine import sim_folder
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.sparsity.arrays import array_module
from spartan_py.trace import TraceRecord, to_frame
from spartan_py.workloads.conv.layers import ConvLayer, conv_layer, feature_maps, im2col
from spartan_py.workloads.conv.saved_maps import saved_maps
from spartan_py.workloads.conv.saved_maps_check import check_saved_maps, saved_layer


@functools.lru_cache(maxsize=32)  # a whole network's layers (VGG-16: 12), reused across precisions
def _maps(label: str, batch: int, density: float, cluster_px: float, seed: int, saved: str | None) -> np.ndarray:
    """A layer's input maps, generated or read from ``saved`` (the workload's ``activations``);
    kept for the next points (a sweep over tiles reuses them)."""
    if saved is not None:
        maps = saved_maps(saved, saved_layer(saved, label))
    else:
        layer = conv_layer(label)
        maps = feature_maps(batch, layer.in_channels, layer.size, density, cluster_px=cluster_px, seed=seed)
    maps.setflags(write=False)
    return maps


def workload_layer(label: str, workload) -> ConvLayer:
    """Layer ``label`` as ``workload`` runs it: at the image side of its saved maps (those of
    the network at another image size: :func:`~spartan_py.workloads.conv.saved_maps_check.image_side`),
    or at 224 px for generated ones."""
    return conv_layer(label) if workload.activations is None else saved_layer(workload.activations, label)


def layer_maps(label: str, workload) -> np.ndarray:
    """The input maps of layer ``label`` for ``workload`` (read-only NCHW, on the host)."""
    density = workload.density_of(label)
    return _maps(label, workload.batch, density, workload.cluster_px, workload.seed, workload.activations)


def map_columns(label: str, workload) -> dict:
    """The ``batch`` and ``map_density`` a layer's rows report: saved maps' own (the layer's
    batch; non-zeros over entries of all the point's layers' maps) or the generated maps'."""
    if workload.activations is None:
        return {"batch": workload.batch, "map_density": workload.density}
    facts = check_saved_maps(workload.activations, tuple(workload.layers))
    return {"batch": facts.batches[label], "map_density": facts.density}


def layer_operands(label: str, workload, tile_cols: int, xp):
    """``(A, W, (M, K_im2col, N))`` of one layer: im2col of generated maps, ``K`` padded to a
    multiple of ``tile_cols``, and scaled Gaussian weights; on the array module ``xp``."""
    layer = workload_layer(label, workload)
    maps = layer_maps(label, workload)
    a = im2col(xp.asarray(maps), layer.kernel, layer.stride, layer.pad)
    m, k = a.shape
    k_pad = -(-k // tile_cols) * tile_cols
    if k_pad != k:
        a = xp.ascontiguousarray(xp.pad(a, ((0, 0), (0, k_pad - k))))
    rng = np.random.default_rng(workload.seed + 1)
    w = rng.standard_normal((k_pad, layer.out_channels), dtype=np.float32) / np.float32(np.sqrt(k))
    return a, xp.asarray(w), (m, k, layer.out_channels)


def _sim_state() -> tuple:
    """The machine files as they stand (name, size, modification time of each): a machine
    loaded for one state is loaded again when a file changes."""
    folder = sim_folder()
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*.yaml")))


@functools.lru_cache(maxsize=8)
def _machine(name: str, state: tuple):
    del state  # part of the key only
    return resolve_machine(name)


def predicted_us(records: list[TraceRecord], machine: str) -> float:
    """Predicted microseconds of ``records`` on ``machine`` (a ``sim/`` name); the machine is
    read once per state of its files (a step prices hundreds of GEMMs, each read ~50 ms)."""
    spec, variant = _machine(machine, _sim_state())
    return float(predict(to_frame(records), spec, variant)["predicted_us"].sum())


def relative_diff(got, reference) -> float:
    """Largest ``|got - reference|`` over the largest ``|reference|`` (1 where that is 0): how far
    a kernel's product is from the dense one, on either device."""
    xp = array_module(reference)
    scale = float(xp.abs(reference).max()) or 1.0
    return float(xp.abs(got - reference).max()) / scale


def with_own_times(records: list[TraceRecord], times_us: list[float]) -> list[TraceRecord]:
    """``records`` (one candidate's launches) with the times a GPU run took of them: ``times_us``
    holds one time per tile-list launch (each timed alone), then the time of the rest taken
    whole. That whole time lands on a launch only where it is the rest's one launch: an
    ``fp32x3`` product (operands split, three TF32 products, the tile GEMM's adds) is timed whole,
    and its time on one of its launches would calibrate that launch's kernel on the product's.
    Where ``times_us`` does not have that form, ``records`` come back unchanged."""
    listed = sum(record.kernel == LIST_TILES for record in records)
    if len(times_us) != listed + 1:
        return records
    rest = len(records) - listed
    list_times = iter(times_us[:listed])
    out = []
    for record in records:
        if record.kernel == LIST_TILES:
            out.append(replace(record, measured_us=next(list_times)))
        elif rest == 1:
            out.append(replace(record, measured_us=times_us[-1]))
        else:
            out.append(record)
    return out
