"""The Spartan machinery on the digits MLP and on real activations: tile utilization, the
sampled monitor's drift, the MLP end to end (``spartan_machinery.py``)."""

from __future__ import annotations

import time

import numpy as np

from benchmarks._conv_cases import GEMM_TILE
from spartan_py.sparsity import SparsityMonitor, tile_counts, tile_utilization
from spartan_py.workloads.conv.layers import conv_layer, feature_maps, im2col

E2E_BATCH_ROWS = (4096, 16384)  # the end-to-end MLP run's batches
E2E_SAMPLED_EVERY = 4  # the sampled monitor's period there, in batches


def utilization(cp, cases, mlp_activations) -> list[dict]:
    """Useful / executed multiply-adds at square tiles 8..64 on three kinds of activations."""
    rows = []
    sources = []
    for label, batch in cases[:3]:
        layer = conv_layer(label)
        for cluster in (0.0, 2.0):
            maps = feature_maps(min(batch, 8), layer.in_channels, layer.size, 0.4, cluster_px=cluster, seed=4)
            a = im2col(cp.asarray(maps), layer.kernel, layer.stride, layer.pad)
            sources.append((f"{label} im2col, 40% dense maps, cluster {cluster:g} px", a))
    for i, act in enumerate(mlp_activations):
        sources.append((f"digits MLP hidden layer {i + 1}", cp.asarray(act)))
    for name, a in sources:
        row = {"activations": name, "density": float(cp.count_nonzero(a)) / a.size}
        for size in (8, 16, 32, 64):
            row[f"util_{size}"] = tile_utilization(a, size)
            row[f"tile_density_{size}"] = float((tile_counts(a, size) > 0).mean())
        rows.append(row)
    return rows


def sampled_drift(cp, mlp, x_batches, every: int = 4) -> dict:
    """The sampled monitor's profile against the full one over successive batches."""
    from spartan_py.sparsity.adaptive import device_weights, run_mlp

    weights = device_weights(mlp, cp.asarray(x_batches[0]))
    full = SparsityMonitor(tile=GEMM_TILE, mode="fused", timed=False)
    sampled = SparsityMonitor(tile=GEMM_TILE, mode="sampled", every=every, timed=False)
    drift, tile_drift, stale = [], [], 0
    for x in x_batches:
        xd = cp.asarray(x)
        a = run_mlp(mlp, xd, monitor=full, weights=weights).profiles
        b = run_mlp(mlp, xd, monitor=sampled, weights=weights).profiles
        for pa, pb in zip(a[:-1], b[:-1]):
            stale += pb.stale
            drift.append(abs(pa.density - pb.density))
            tile_drift.append(abs(pa.tile_density - pb.tile_density))
    return {
        "every": every,
        "batches": len(x_batches),
        "stale_profiles": stale,
        "max_density_drift": max(drift),
        "mean_density_drift": float(np.mean(drift)),
        "max_tile_density_drift": max(tile_drift),
    }


def _host_us(cp, work, calls: int = 6) -> float:
    """Host microseconds to queue one ``work(i)`` (waits inside it included), the GPU idle at
    the start: where it exceeds the GPU's time the run is host-bound."""
    work(0)
    cp.cuda.Device().synchronize()
    started = time.perf_counter()
    for i in range(calls):
        work(i)
    host = (time.perf_counter() - started) / calls * 1e6
    cp.cuda.Device().synchronize()
    return host


def mlp_end_to_end(cp, timer, mlp, x, policy) -> dict:
    """The trained MLP on all of ``x``, adaptive (fused monitor + policy) vs dense cuBLAS, by
    turns: in batches of each of :data:`E2E_BATCH_ROWS` rows, deciding from the previous
    batch's profiles (``AdaptiveMlp``, lag 1; with the fused monitor, or the sampled one
    profiling every :data:`E2E_SAMPLED_EVERY`-th batch) or from each batch's own (lag 0: the
    host waits for each layer's counts), and as one batch (``run_mlp``, lag 0). Each case's
    host time to queue it is reported too (a lag-1 host waits for the previous batch, so
    its host time follows the GPU's)."""
    from spartan_py.sparsity.adaptive import AdaptiveMlp, device_weights, run_mlp

    xd = cp.asarray(x)
    weights = device_weights(mlp, xd)

    def monitor(mode: str = "fused"):
        return SparsityMonitor(tile=GEMM_TILE, mode=mode, every=E2E_SAMPLED_EVERY, timed=False)

    cases, models = {}, {}
    for rows in E2E_BATCH_ROWS:
        batches = [xd[i : i + rows] for i in range(0, xd.shape[0], rows)]
        for name, model in (
            (f"dense_{rows}", AdaptiveMlp(mlp, weights=weights)),
            (f"adaptive_{rows}", AdaptiveMlp(mlp, policy, monitor(), weights=weights)),
            (f"adaptive_sampled_{rows}", AdaptiveMlp(mlp, policy, monitor("sampled"), weights=weights)),
            (f"adaptive_lag0_{rows}", AdaptiveMlp(mlp, policy, monitor(), weights=weights, lag=0)),
        ):
            cases[name] = lambda i, model=model, batches=batches: [model(b) for b in batches]
            models[name] = model
    whole = monitor()
    cases["dense_one_batch"] = lambda i: run_mlp(mlp, xd, weights=weights)
    cases["adaptive_one_batch"] = lambda i: run_mlp(mlp, xd, weights=weights, policy=policy, monitor=whole)
    times = timer.by_turns(cases, rounds=10, calls=2)
    median = {name: float(np.median(t)) for name, t in times.items()}
    host = {name: _host_us(cp, work) for name, work in cases.items()}
    run = run_mlp(mlp, xd, weights=weights, policy=policy, monitor=whole)
    batched = models[f"adaptive_{E2E_BATCH_ROWS[-1]}"](xd[: E2E_BATCH_ROWS[-1]])
    base = run_mlp(mlp, xd, weights=weights)
    agree = float((run.logits.argmax(axis=1) == base.logits.argmax(axis=1)).mean())
    ratios = {
        f"adaptive_over_dense_{rows}": median[f"adaptive_{rows}"] / median[f"dense_{rows}"] for rows in E2E_BATCH_ROWS
    }
    ratios |= {
        f"adaptive_{kind}_over_dense_{rows}": median[f"adaptive_{kind}_{rows}"] / median[f"dense_{rows}"]
        for rows in E2E_BATCH_ROWS
        for kind in ("sampled", "lag0")
    }
    ratios["adaptive_over_dense_one_batch"] = median["adaptive_one_batch"] / median["dense_one_batch"]
    return {
        "rows": int(x.shape[0]),
        "batch_rows": list(E2E_BATCH_ROWS),
        "sizes": list(mlp.sizes),
        **{f"{name}_us": us for name, us in median.items()},
        **{
            f"{name}_p10_p90_us": [float(np.percentile(t, 10)), float(np.percentile(t, 90))]
            for name, t in times.items()
        },
        **{f"{name}_host_us": us for name, us in host.items()},
        **ratios,
        "kernels": [d.kernel for d in run.decisions],
        "reasons": [d.reason for d in run.decisions],
        "reasons_batched": [d.reason for d in batched.decisions],
        "densities": [p.density for p in run.profiles if p is not None],
        "tile_densities": [p.tile_density for p in run.profiles if p is not None],
        "argmax_agreement": agree,
    }
