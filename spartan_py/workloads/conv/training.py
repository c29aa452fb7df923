"""The training step of a ``conv_layers`` point (``step: training``): per convolution layer the
three GEMMs of one step, each dense (cuBLAS; NumPy on the CPU) and adaptive (the policy's pick
from the monitor's counts), every result checked against the dense one.

For a layer ``Y = X W`` (``X`` the im2col of its post-ReLU input maps, ``[M x K]``):

``forward``      ``X W``: ``X``'s zero tiles skipped (the forward workload's GEMM).
``weight_grad``  ``dW = X^T dY``: ``X``'s zero tiles skipped along the contraction. The tile
                 GEMM reads ``X`` transposed in place (FP32); TF32 copies ``X^T`` first, and
                 the policy counts that copy against it. Candidates: dense and tile-sparse (a
                 fixed ``policy`` of another kernel leaves this GEMM to the adaptive choice).
``input_grad``   ``dX = dY W^T``: ``dY`` is the output's gradient after its ReLU, zero where
                 the layer's output was (the output's monitor profile is its pattern), so its
                 zero tiles are skipped; a sparse pick copies ``W^T`` first (in its time).
                 Where a BatchNorm sits between the convolution and its ReLU (ResNet-18),
                 ``dY`` is dense: the GEMM is dense in both, and the row says so.

``X``'s rows (``M``) are padded with zero rows to whole tiles where they are not (batch 1 of a
14 x 14 layer: 196 -> 256), in both steps alike; the rows give the padded ``M``.
The output's pattern comes from generated maps of the layer's output size and channels at the
layer's input density (``layer_densities`` or ``density``; with ``activations``, the mask the
file carries, else generated at the saved input's measured density and batch). The monitor
counts ``X`` at a square tile dividing both the GEMM tile and its transpose, so that the same
counts serve ``X`` and ``X^T``; its cost, and that of the output's profile, is charged to the
adaptive step (a layer's output profile is also the next layer's input profile: charging both
counts that pass twice, on the adaptive side). Each adaptive time is the chosen kernel with its
list launches and copies; the decision is off the critical path, as in a training loop that
decides from the previous step's counts, copied to the host while the GPU works
(:class:`~spartan_py.sparsity.AdaptiveMlp`'s ``lag=1``); the row's ``reason`` gives it. A
dense pick runs the cuBLAS call the dense step runs: it carries that one time. The monitor's
cost is its epilogue with and without counting timed by turns (per-round differences). The
bound of a GEMM is its dense time scaled by its sparse operand's tile density: the time if every
skipped tile cost nothing. im2col and col2im (the input gradient's columns back to maps) are
timed apart: the same in both steps. Each row gives the dense product's error against float64
(at the point's precision, on :data:`ERROR_ROWS` of its output rows), and the layer's first row
the software monitor's cost beside the fused one's (Spartan's profiling overhead ratio).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from spartan_py.costmodel.families import COMPACT, EPILOGUE, ROLE_SEPARATOR
from spartan_py.sparsity import (
    KernelPolicy,
    SparsityMonitor,
    dense_matmul,
    matmul_error,
    tile_sparse_matmul,
    tile_utilization,
)
from spartan_py.sparsity.arrays import array_module
from spartan_py.sparsity.cublas_algo import with_algorithms
from spartan_py.sparsity.monitor import LayerProfile
from spartan_py.sparsity.policy import Decision
from spartan_py.sparsity.tiles import TileCounts, TileShape
from spartan_py.trace import TraceRecord
from spartan_py.workloads.conv.cudnn import choose_dense_path, cudnn_description, cudnn_unavailable, time_cudnn
from spartan_py.workloads.conv.layers import IMAGE_PX, col2im, conv_layer, feature_maps, im2col
from spartan_py.workloads.conv.operands import (
    layer_maps,
    layer_operands,
    map_columns,
    predicted_us,
    relative_diff,
    with_own_times,
    workload_layer,
)
from spartan_py.workloads.conv.saved_maps_check import image_side, saved_gradient_mask

#: The three GEMMs of a layer's training step, in the order a step runs them per layer.
TRAINING_GEMMS = ("forward", "weight_grad", "input_grad")
#: Output rows (evenly spaced) on which each GEMM's error against float64 is measured.
ERROR_ROWS = 1024


@functools.lru_cache(maxsize=32)
def output_mask(label: str, batch: int, density: float, cluster_px: float, seed: int, px: int = IMAGE_PX) -> np.ndarray:
    """Where the layer's output is non-zero after its ReLU, as GEMM rows ``[M x N]`` (batch,
    out_y, out_x by channel): generated maps of the output's size (at ``px``-pixel images) and
    channels."""
    layer = conv_layer(label, px)
    maps = feature_maps(batch, layer.out_channels, layer.out_size, density, cluster_px=cluster_px, seed=seed + 2)
    rows = np.ascontiguousarray(maps.transpose(0, 2, 3, 1).reshape(-1, layer.out_channels))
    rows.setflags(write=False)
    return rows


def counting_tile(tile: TileShape) -> TileShape:
    """The monitor's tile for a step: square, dividing the GEMM tile and its transpose."""
    side = min(tile.rows, tile.cols)
    return TileShape(side, side)


def transposed_profile(profile, xp):
    """The profile of ``X^T`` from ``X``'s (square tiles): the tile counts transposed; each row
    of ``X^T`` (a column of ``X``) counted as its tile row's total, so live rows are rows of
    non-empty tile rows (at the tile's grain, not exact)."""
    m, k = profile.shape
    counts = xp.ascontiguousarray(profile.tile_nnz.T)
    rows = xp.repeat(counts.sum(axis=1, dtype=counts.dtype), profile.tile.rows)[:k]
    return LayerProfile(profile.layer, profile.mode, profile.tile, (k, m), counts, xp.ascontiguousarray(rows))


class _Gemm:
    """One GEMM of the step: ``A @ W`` where ``A`` is ``a`` (or ``a.T`` when ``transposed``)."""

    def __init__(self, name: str, a, w, *, transposed: bool = False, operand: str, m: int, k: int):
        self.name, self.a, self.w, self.transposed, self.operand = name, a, w, transposed, operand
        self.m, self.k, self.n = m, k, w.shape[1]


def _tile_counts_at(policy, profile):
    counts = policy.counts_at_tile(profile)
    assert counts is not None, "the counting tile divides the GEMM tile"  # counting_tile makes it so
    return counts


def _monitor_us(matrices: list, mode: str, tile: TileShape, clock) -> float:
    """What the monitor of ``mode`` adds to the epilogues writing ``matrices``: each epilogue
    with it and without (plain) timed by turns, the median differences summed (each >= 0)."""
    if mode == "off":
        return 0.0
    monitor, plain = SparsityMonitor(tile=tile, mode=mode, timed=False), SparsityMonitor(mode="off", timed=False)
    total = 0.0
    for matrix in matrices:
        out = array_module(matrix).empty_like(matrix)
        total += max(
            0.0,
            clock.difference(
                lambda matrix=matrix, out=out: monitor.epilogue(matrix, out=out),
                lambda matrix=matrix, out=out: plain.epilogue(matrix, out=out),
            ),
        )
    return total


def _epilogue_records(m: int, n: int, tile: TileShape) -> tuple[TraceRecord, TraceRecord]:
    """(fused, plain) epilogue records over an ``[m x n]`` matrix: what the monitor adds is the
    model's difference of the two (as ``trace`` records them)."""
    moved, counts = 4 * m * n, 4 * math.prod(tile.grid((m, n))) + 4 * m
    plain = TraceRecord(
        run="", layer=0, device="policy", kernel=EPILOGUE, variant="plain", monitor_mode="off", rows_in=m, rows_out=m
    )
    plain = replace(plain, cols=n, bytes_read=moved, bytes_written=moved)
    fused = replace(plain, variant="fused", monitor_mode="fused", bytes_written=moved + counts, monitor_bytes=counts)
    return fused, plain


def run_training_layer(label: str, config, xp, clock, policy, machine: str) -> tuple[list[dict], list[TraceRecord]]:
    """One layer's three GEMMs: a row each (times, choice, check, bound, and the cost model's
    times on ``machine`` and on it with a hardware monitor) and the trace records of the
    kernels the adaptive step launched."""
    hw_machine = machine if "+" in machine else f"{machine}+hw-monitor"

    def predict_us(records, on=machine):
        return predicted_us(records, on) if records else 0.0

    workload = config.workload
    layer = workload_layer(label, workload)
    tile = policy.tile
    side = max(tile.rows, tile.cols)
    x, w, (m_true, k_true, n) = layer_operands(label, workload, side, xp)
    m = -(-m_true // side) * side  # X's rows are the weight gradient's contraction: whole tiles
    if m != m_true:
        x = xp.ascontiguousarray(xp.pad(x, ((0, m - m_true), (0, 0))))
    k = x.shape[1]
    monitor = SparsityMonitor(tile=counting_tile(tile), mode=config.monitor, timed=clock is not None)
    counter = SparsityMonitor(tile=counting_tile(tile), mode="fused", timed=False)  # monitor off: counts, untimed
    x, x_profile = monitor.epilogue(x, out=x)
    if x_profile is None:
        x_profile = counter.epilogue(x)[1]
    gradient = xp.asarray(np.random.default_rng(workload.seed + 3).standard_normal((m, n), dtype=np.float32))
    dy_profile = None
    monitored = [x]
    if not layer.batchnorm:
        batch = m_true // layer.out_size**2  # the maps' (saved maps: theirs, whatever workload.batch says)
        saved = saved_gradient_mask(workload.activations, layer, batch) if workload.activations else None
        if saved is None:
            saved_density = float(x_profile.density * k / k_true)
            density = workload.density_of(label) if workload.activations is None else saved_density
            px = IMAGE_PX if workload.activations is None else image_side(workload.activations, layer.network)
            saved = output_mask(label, batch, min(density, 1.0), workload.cluster_px, workload.seed, px)
        mask = xp.asarray(saved)
        if m != m_true:
            mask = xp.ascontiguousarray(xp.pad(mask, ((0, m - m_true), (0, 0))))
        mask, dy_profile = monitor.epilogue(mask)
        if dy_profile is None:
            dy_profile = counter.epilogue(mask)[1]
        monitored.append(mask)
        gradient *= mask > 0
    monitor_us = _monitor_us(monitored, config.monitor, counting_tile(tile), clock) if clock is not None else 0.0
    software_us = _monitor_us(monitored, "software", counting_tile(tile), clock) if clock is not None else float("nan")
    predicted_monitor = {on: 0.0 for on in (machine, hw_machine)}
    if config.monitor != "off":
        for matrix in monitored:
            fused, plain = _epilogue_records(matrix.shape[0], matrix.shape[1], counting_tile(tile))
            for on in predicted_monitor:
                predicted_monitor[on] += max(0.0, predict_us([fused], on) - predict_us([plain], on))
    w_t = xp.ascontiguousarray(w.T)
    gemms = [
        (_Gemm("forward", x, w, operand="X", m=m, k=k), x_profile),
        (
            _Gemm("weight_grad", x, gradient, transposed=True, operand="X^T", m=k, k=m),
            transposed_profile(x_profile, xp),
        ),
        (_Gemm("input_grad", gradient, w_t, operand="none" if dy_profile is None else "dY", m=m, k=n), dy_profile),
    ]
    wgrad_policy = KernelPolicy(
        policy.machine_name, precision=policy.precision, kernels=("dense", "tile_sparse"), tile=tile
    )
    rows, trace, references = [], [], {}
    for gemm, profile in gemms:
        chooser = wgrad_policy if gemm.transposed else policy
        reference = dense_matmul(gemm.a, gemm.w, precision=policy.precision, transposed_a=gemm.transposed)
        tiles_total = math.prod(tile.grid((gemm.m, gemm.k)))
        if profile is None:
            decision = Decision(label, "dense", reason="BatchNorm between the convolution and its ReLU: dY is dense")
            nnz, active, live = gemm.m * gemm.k, tiles_total, gemm.m
        else:
            nnz, active, live = chooser.profile_counts(profile)
            if config.policy != "adaptive" and config.policy in chooser.kernels:
                decision = Decision(label, config.policy, reason=f"fixed by the experiment (policy: {config.policy})")
            else:
                decision = chooser.choose(profile, gemm.n, layer=label)
        copy_records: list[TraceRecord] = []
        if decision.kernel != "dense" and (
            gemm.name == "input_grad" or (gemm.transposed and policy.precision != "fp32")
        ):
            moved = 4 * (n * k if gemm.name == "input_grad" else m * k)
            copy_records = [
                TraceRecord(
                    run="",
                    layer=0,
                    device="policy",
                    kernel=COMPACT,
                    variant="transpose",
                    bytes_read=moved,
                    bytes_written=moved,
                )
            ]
        if gemm.transposed and copy_records and config.policy == "adaptive":
            extra = predict_us(copy_records)
            if decision.predicted_us["tile_sparse"] + extra > (1 - chooser.margin) * decision.predicted_us["dense"]:
                decision = Decision(
                    label,
                    "dense",
                    decision.predicted_us,
                    f"dense: tile_sparse with the copy of X^T ({extra:.1f} us) not {chooser.margin:.0%} faster",
                )
                copy_records = []

        def run_sparse(out, gemm=gemm, profile=profile, chooser=chooser):
            counts = _tile_counts_at(chooser, profile)
            shape = (gemm.m, gemm.k)
            return tile_sparse_matmul(
                gemm.a,
                gemm.w,
                TileCounts(shape, tile, counts),
                precision=policy.precision,
                transposed_a=gemm.transposed,
                out=out,
            )

        def run_chosen(out, gemm=gemm, decision=decision, profile=profile):
            if decision.kernel == "dense":
                return dense_matmul(gemm.a, gemm.w, precision=policy.precision, transposed_a=gemm.transposed, out=out)
            if gemm.transposed:
                return run_sparse(out)
            w_operand = xp.ascontiguousarray(w.T) if gemm.name == "input_grad" else gemm.w
            return policy.run(decision, gemm.a, w_operand, profile, out=out)

        chosen = run_chosen(xp.empty_like(reference))
        sparse = run_sparse(xp.empty_like(reference)) if profile is not None else reference
        dense_records = chooser.records("dense", gemm.m, gemm.k, gemm.n, nnz=nnz, tiles_active=active, live_rows=live)
        chosen_records = copy_records + chooser.records(
            decision.kernel, gemm.m, gemm.k, gemm.n, nnz=nnz, tiles_active=active, live_rows=live
        )
        tile_records = chooser.records(
            "tile_sparse", gemm.m, gemm.k, gemm.n, nnz=nnz, tiles_active=active, live_rows=live
        )
        tile_density = active / max(tiles_total, 1)
        row = {
            "layer": label,
            **map_columns(label, workload),
            "gemm": gemm.name,
            "sparse_operand": gemm.operand,
            "M": gemm.m,
            "K": gemm.k,
            "K_padded": gemm.k,
            "N": gemm.n,
            "tile": f"{tile.rows}x{tile.cols}",
            "tile_rows": tile.rows,
            "tile_cols": tile.cols,
            "density": nnz / max(gemm.m * gemm.k, 1),
            "tile_density": tile_density,
            "live_row_fraction": live / max(gemm.m, 1),
            "utilization": tile_utilization(gemm.a.T if gemm.transposed else gemm.a, tile) if profile else 1.0,
            "kernel": decision.kernel,
            "reason": decision.reason,
            "tile_sparse_max_rel_diff": relative_diff(sparse, reference),
            "chosen_max_rel_diff": relative_diff(chosen, reference),
            "dense_max_rel_err": matmul_error(reference, gemm.a, gemm.w, transposed_a=gemm.transposed, rows=ERROR_ROWS)[
                "max_rel"
            ],
            "tile_list_us": 0.0,
        }
        first = gemm.name == "forward"  # the layer's monitor cost sits on its first row
        row |= {
            "predicted_dense_us": predict_us(dense_records),
            "predicted_chosen_us": predict_us(chosen_records),
            "predicted_monitor_us": predicted_monitor[machine] if first else 0.0,
            "hw_monitor_chosen_us": predict_us(chosen_records, hw_machine),
            "hw_monitor_monitor_us": predicted_monitor[hw_machine] if first else 0.0,
        }
        if clock is None:  # simulated: the cost model's times on machines[0]
            row |= {
                "dense_us": row["predicted_dense_us"],
                "tile_sparse_us": predict_us(tile_records) if profile is not None else row["predicted_dense_us"],
                "chosen_us": row["predicted_chosen_us"],
                "monitor_us": row["predicted_monitor_us"],
            }
        else:
            scratch = xp.empty_like(reference)
            row["dense_us"] = clock(
                lambda gemm=gemm: dense_matmul(
                    gemm.a, gemm.w, precision=policy.precision, transposed_a=gemm.transposed, out=scratch
                )
            )
            row["tile_sparse_us"] = clock(lambda: run_sparse(scratch)) if profile is not None else row["dense_us"]

            # dense picks run the very cuBLAS call timed above: one time for both
            row["chosen_us"] = (
                row["dense_us"]
                if decision.kernel == "dense"
                else clock(lambda run_chosen=run_chosen: run_chosen(scratch))
            )
            row["monitor_us"] = monitor_us if first else 0.0
            row["software_monitor_us"] = software_us if first else 0.0
            if decision.kernel == "dense" and xp is not np:
                chosen_records = with_own_times(chosen_records, [row["dense_us"]])
            if xp is not np:
                chosen_records = with_algorithms(chosen_records, transposed_a=gemm.transposed)
        row["bound_us"] = row["dense_us"] * tile_density if profile is not None else row["dense_us"]
        row["speedup_tile_sparse"] = row["dense_us"] / row["tile_sparse_us"]
        row["speedup_chosen"] = row["dense_us"] / row["chosen_us"]
        row["speedup_bound"] = row["dense_us"] / row["bound_us"] if row["bound_us"] > 0 else float("inf")
        references[gemm.name] = reference
        if gemm.name == "input_grad":
            input_gradient = reference
        rows.append(row)
        trace += [
            replace(r, variant=f"{r.variant}{ROLE_SEPARATOR}{gemm.name}".lstrip(ROLE_SEPARATOR)) for r in chosen_records
        ]
    if clock is not None:  # the same in a dense and an adaptive step: timed apart
        maps = xp.asarray(layer_maps(label, workload))
        rows[0]["im2col_us"] = clock(lambda: im2col(maps, layer.kernel, layer.stride, layer.pad))
        rows[0]["col2im_us"] = clock(lambda: col2im(input_gradient, maps.shape, layer.kernel, layer.stride, layer.pad))
        if cudnn_unavailable(xp, policy.precision) is None:
            time_cudnn(rows, layer, (maps, w, gradient), references, clock, policy.precision)
    choose_dense_path(rows)
    return rows, trace


def cudnn_baseline(xp, precision: str) -> str:
    """Which cuDNN baseline the step ran (its versions and calls), or why it ran none, in one line."""
    return cudnn_unavailable(xp, precision) or cudnn_description()


def step_totals(rows: list[dict]) -> dict:
    """Seconds of the whole step, dense and adaptive (with the monitor's cost), its bound, the
    speed-ups, and the cost model's dense and adaptive step and its hardware-monitor what-if,
    from the GEMM rows of every layer."""
    dense = sum(r["dense_us"] for r in rows) * 1e-6
    monitor = sum(r["monitor_us"] for r in rows) * 1e-6
    software = sum(r.get("software_monitor_us", float("nan")) for r in rows) * 1e-6
    adaptive = sum(r["chosen_us"] for r in rows) * 1e-6 + monitor
    bound = sum(r["bound_us"] for r in rows) * 1e-6

    def total(*columns: str) -> float:
        return sum(r.get(c, 0.0) for r in rows for c in columns) * 1e-6

    firsts = [r for r in rows if r["gemm"] == "forward"]
    cublas_step = dense + total("im2col_us", "col2im_us") if all("im2col_us" in r for r in firsts) else math.nan
    cudnn = total("cudnn_us") if all("cudnn_us" in r for r in rows) else math.nan
    step = total("adaptive_us") + monitor
    faster = min((t for t in (cublas_step, cudnn) if math.isfinite(t)), default=math.nan)
    return {
        "dense_cublas_step_seconds": cublas_step,
        "dense_cudnn_seconds": cudnn,
        "faster_dense_seconds": faster,
        "adaptive_step_seconds": step,
        "adaptive_over_faster_dense": step / faster if faster > 0 else math.nan,
        "cudnn_layers": sum(r.get("dense_path") == "cudnn" for r in firsts),
        "cudnn_max_rel_diff": max((r.get("cudnn_max_rel_diff", math.nan) for r in rows), default=math.nan),
        "predicted_dense_seconds": total("predicted_dense_us"),
        "predicted_seconds": total("predicted_chosen_us", "predicted_monitor_us"),
        "hw_monitor_seconds": total("hw_monitor_chosen_us", "hw_monitor_monitor_us"),
        "dense_seconds": dense,
        "seconds": adaptive,
        "bound_seconds": bound,
        "monitor_seconds": monitor,
        "software_monitor_seconds": software,
        "profiling_ratio": software / monitor if monitor > 0 else float("nan"),
        "im2col_seconds": sum(r.get("im2col_us", 0.0) for r in rows) * 1e-6,
        "col2im_seconds": sum(r.get("col2im_us", 0.0) for r in rows) * 1e-6,
        "speedup": dense / adaptive if adaptive > 0 else float("nan"),
        "speedup_bound": dense / bound if bound > 0 else float("nan"),
        "max_rel_diff": max(r["chosen_max_rel_diff"] for r in rows),
        "max_rel_err": max(r["dense_max_rel_err"] for r in rows),
    }
