"""The Spartan machinery's correctness against the CPU and its profiling overhead by monitor
mode (``spartan_machinery.py``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from benchmarks._conv_cases import GEMM_TILE, gemm_tile_shape
from benchmarks.harness import difference, log
from spartan_py.costmodel.families import EPILOGUE, MONITOR_PASS
from spartan_py.sparsity import (
    KernelPolicy,
    SparsityMonitor,
    compact_rows,
    compact_tiles,
    dense_matmul,
    expand_rows,
    expand_tiles,
    matmul_error,
    tile_sparse_matmul,
)
from spartan_py.sparsity.candidates import candidate_records
from spartan_py.workloads.conv.layers import conv_layer, tiled_preactivations


def check_against_cpu(cp) -> list[dict]:
    """Every GPU function against its CPU twin on small shapes; raises on a mismatch."""
    rng = np.random.default_rng(0)
    rows = []
    z = tiled_preactivations(300, 256, 0.3, tile=GEMM_TILE, seed=1)
    bias = rng.standard_normal(256).astype(np.float32) * 0.1
    for tile in ((8, 8), (32, 32), (128, 32), (64, 128), (1, 4)):
        for mode in ("software", "fused"):
            y_cpu, p_cpu = SparsityMonitor(tile=tile, mode=mode).epilogue(z, bias, clamp=1.5)
            y_gpu, p_gpu = SparsityMonitor(tile=tile, mode=mode).epilogue(cp.asarray(z), cp.asarray(bias), clamp=1.5)
            assert np.array_equal(y_cpu, y_gpu.get()), (tile, mode)
            assert np.array_equal(p_cpu.tile_nnz, cp.asnumpy(p_gpu.tile_nnz)), (tile, mode)
            assert np.array_equal(p_cpu.row_nnz, cp.asnumpy(p_gpu.row_nnz)), (tile, mode)
        rows.append({"check": f"epilogue+monitor {tile}", "result": "equal"})
    y = np.maximum(z, 0)
    y_dev = cp.asarray(y)
    packed = compact_rows(y_dev)
    assert np.array_equal(cp.asnumpy(expand_rows(packed)), y)
    for tile in ((128, 32), (16, 16)):
        tiles = compact_tiles(y_dev, tile)
        assert np.array_equal(cp.asnumpy(expand_tiles(tiles)), y)
        assert np.array_equal(cp.asnumpy(tiles.tiles.coords), compact_tiles(y, tile).tiles.coords)
    rows.append({"check": "compaction round trips", "result": "equal"})
    w = rng.standard_normal((256, 192)).astype(np.float32)
    for precision, tile in (("fp32", (128, 32)), ("fp32", (64, 16)), ("tf32", (128, 32))):
        tl_cpu = compact_tiles(y, tile, pack=False).tiles
        tl_gpu = compact_tiles(y_dev, tile, pack=False).tiles
        c_cpu = tile_sparse_matmul(y, w, tl_cpu, precision=precision)
        c_gpu = tile_sparse_matmul(y_dev, cp.asarray(w), tl_gpu, precision=precision)
        err = matmul_error(c_gpu, y, w)
        diff = float(np.abs(c_gpu.get() - c_cpu).max() / np.abs(c_cpu).max())
        assert diff < (1e-5 if precision == "fp32" else 2e-3), (precision, tile, diff)
        rows.append(
            {
                "check": f"tile GEMM {precision} {tile}",
                "result": f"max rel diff to CPU {diff:.1e}",
                "max_rel_error_vs_fp64": err["max_rel"],
                "rms_rel_error_vs_fp64": err["rms_rel"],
            }
        )
    policy = KernelPolicy()
    _, profile = SparsityMonitor(tile=GEMM_TILE).epilogue(cp.asarray(z), out=y_dev.copy())
    decision = policy.choose(profile, 192)
    for kernel in ("dense", "tile_sparse", "row_compact", "csr"):
        c = policy.run(replace(decision, kernel=kernel), y_dev, cp.asarray(w), profile)
        assert matmul_error(c, y, w)["max_rel"] < 1e-5, kernel
    rows.append({"check": "policy kernels", "result": "all four match fp64 within 1e-5"})
    return rows


#: Monitor tiles of the overhead measurement (rows x columns): (32, 32) is the headline;
#: the others show the cost does not hinge on the tile.
OVERHEAD_TILES = ((32, 32), (16, 32), GEMM_TILE)
#: Buffers each overhead case cycles through: more than L2 holds, so no call finds its
#: operands there.
OVERHEAD_BUFFERS = 4


def _epilogue_launcher(cp, mode, zs, ys, bias, tile):
    """``work(i)``: one launch of the epilogue kernel of ``mode`` on buffer pair
    ``i % len(zs)``, its outputs allocated beforehand, so the time is the GPU's alone."""
    from spartan_py.sparsity.gpu_kernels import epilogue_grid, launch_epilogue

    m, n = zs[0].shape
    tile_nnz = cp.empty((-(-m // tile[0]), -(-n // tile[1])), dtype=cp.int32)
    row_part = cp.empty((m, epilogue_grid(m, n)[0]), dtype=cp.int32)
    shape = (np.int32(m), np.int32(n), np.float32(np.inf), np.int32(tile[0]), np.int32(tile[1]), tile_nnz, row_part)
    return lambda i: launch_epilogue(mode, m, n, (zs[i % len(zs)], bias, ys[i % len(ys)], *shape))


def profiling_overhead(cp, timer, cases, rounds: int = 40) -> tuple[list[dict], list]:
    """Per conv layer, what monitoring costs, in two measurements taken by turns
    (``timer.by_turns``, :mod:`benchmarks.harness`; differences round by round):

    * the epilogue kernel alone, back to back over buffers larger than L2: plain, fused
      (per monitor tile) and the software monitor's counting pass. ``fused_extra_us`` is
      fused minus plain: the fused monitor's cost, free of host noise.
    * a layer loop, cuBLAS GEMM then the epilogue through ``SparsityMonitor`` in each mode
      (off, fused, sampled, software), as a network would run it: the host's work hides
      behind the GEMM except where the software monitor waits for its counts.
      ``software_extra_us`` is software minus off there.

    ``ratio_software_over_fused`` = software_extra_us / fused_extra_us.
    """
    rows, records = [], []
    for label, batch in cases:
        m, k, n = conv_layer(label).gemm_shape(batch)
        a = cp.asarray(tiled_preactivations(m, k, 0.5, tile=GEMM_TILE, seed=2, xp=cp).clip(0, None))
        rng = np.random.default_rng(3)
        weights = [
            cp.asarray((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)) for _ in range(OVERHEAD_BUFFERS)
        ]
        zs = [dense_matmul(a, w) for w in weights]  # real pre-activations, about half of them negative
        ys = [cp.empty_like(z) for z in zs]
        bias = cp.asarray(rng.standard_normal(n).astype(np.float32) * 0.1)
        kernel_cases = {
            "plain": _epilogue_launcher(cp, "plain", zs, ys, bias, (1, 4)),
            "count_pass": _epilogue_launcher(cp, "count", ys, ys, bias, (32, 32)),
        }
        for tile in OVERHEAD_TILES:
            kernel_cases[f"fused_{tile[0]}x{tile[1]}"] = _epilogue_launcher(cp, "fused", zs, ys, bias, tile)
        alone = timer.by_turns(kernel_cases, rounds=rounds, calls=8)
        monitors = {
            mode: SparsityMonitor(tile=(32, 32), mode=mode, timed=False)
            for mode in ("off", "fused", "sampled", "software")
        }

        def layer(monitor):
            def work(i):
                dense_matmul(a, weights[i % OVERHEAD_BUFFERS], out=zs[0])
                monitor.epilogue(zs[0], bias, out=ys[0])

            return work

        loop = timer.by_turns({mode: layer(mon) for mode, mon in monitors.items()}, rounds=rounds, calls=6)
        plain_us = float(np.median(alone["plain"]))
        fused = {t: difference(alone, t, "plain") for t in alone if t.startswith("fused")}
        extra = fused["fused_32x32"]["median"]
        layer_us = float(np.median(loop["off"]))
        software = difference(loop, "software", "off")
        row = {
            "layer": label,
            "batch": batch,
            "M": m,
            "K": k,
            "N": n,
            "layer_us": layer_us,
            "epilogue_us": plain_us,
            "fused_extra_us": extra,
            "fused_extra_p10_p90_us": [fused["fused_32x32"]["p10"], fused["fused_32x32"]["p90"]],
            **{f"fused_extra_us_{t[6:]}": d["median"] for t, d in fused.items() if t != "fused_32x32"},
            "count_pass_us": float(np.median(alone["count_pass"])),
            "software_extra_us": software["median"],
            "software_extra_p10_p90_us": [software["p10"], software["p90"]],
            "fused_extra_in_layer_loop_us": difference(loop, "fused", "off")["median"],
            "sampled_extra_in_layer_loop_us": difference(loop, "sampled", "off")["median"],
            "ratio_software_over_fused": software["median"] / extra if extra > 0 else float("inf"),
            "fused_overhead_pct_of_layer": 100 * extra / layer_us,
            "software_overhead_pct_of_layer": 100 * software["median"] / layer_us,
        }
        rows.append(row)
        out_bytes = 4 * m * n
        records += [
            *[
                replace(r, measured_us=layer_us - plain_us, run=f"{label}/overhead")
                for r in candidate_records("dense", m, k, n, nnz=0, tiles_active=0, live_rows=m, tile=gemm_tile_shape())
            ],
            _rec(EPILOGUE, label, plain_us, bytes_read=out_bytes, bytes_written=out_bytes),
            _rec(MONITOR_PASS, label, row["count_pass_us"], bytes_read=out_bytes, monitor_mode="software"),
        ]
        log(
            f"overhead {label}: fused +{extra:.2f} us (kernel), software +{software['median']:.1f} us (layer loop), "
            f"ratio {row['ratio_software_over_fused']:.0f}x, layer {layer_us:.0f} us"
        )
        a = weights = zs = ys = kernel_cases = None  # free the buffers before the next layer
        cp.get_default_memory_pool().free_all_blocks()
    return rows, records


def _rec(kernel: str, label: str, us: float, **fields):
    from spartan_py.trace import TraceRecord

    return TraceRecord(run=label, layer=0, kernel=kernel, measured_us=us, device="gpu", **fields)
