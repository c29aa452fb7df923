"""The fp32x3 product's own passes timed alone: calibration records for ``gpu.compact/split``
and ``gpu.compact/add`` (issue 73, item 1).

An ``fp32x3`` product (:mod:`spartan_py.sparsity.three_tf32`) splits both operands into their
TF32 part and residual (one pass over each, recorded as one ``split-tf32`` launch of the
compaction family) and runs three TF32 products; the tile GEMM's second and third products are
written apart and added into the output by an ``add`` pass each. A conv point times such a
product whole, so no run gave these passes times of their own and the H100 priced them by the
compaction family's shared fit. This script runs, for the im2col GEMM of every convolution
layer of the three networks (shapes deduplicated) at ``--batches``, the split of ``A`` and
``W`` and one ``add`` pass on random float32 operands, each alone (CUDA events, warm-up, L2
flushed before each repeat, the smaller of two medians of ``--repeats``: the conv workload's
clock), checks the split exact (``hi + lo == x``) and the sum right, and writes the records the
cost model prices for them (from :func:`~spartan_py.sparsity.candidates.candidate_records`, so
the bytes are the model's) with their times as a kept trace, one run per record.

    python -m benchmarks.fp32x3_passes --out DIR [--batches 8,32] [--repeats 20]

A point whose ``A`` would exceed ``--max-elements`` is left out (said in the log).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import log
from spartan_py.costmodel.families import COMPACT
from spartan_py.sparsity.candidates import candidate_records
from spartan_py.sparsity.tiles import TileShape
from spartan_py.trace import TraceRecord, write_trace
from spartan_py.workloads.conv.layers import CONV_LAYERS

#: The passes' variants in the records :func:`candidate_records` makes for an fp32x3 product.
PASSES = ("split-tf32", "add")

#: Largest ``A`` (elements) timed by default: 1 GiB of float32, three copies live at once.
MAX_ELEMENTS = 2**28


def gemm_shapes(batches: list[int], max_elements: int = MAX_ELEMENTS) -> list[tuple[str, int, int, int]]:
    """``(label, m, k, n)`` of the im2col GEMM of every layer of the three networks at each batch,
    one per distinct shape, ``m * k`` at most ``max_elements``."""
    shapes: dict[tuple[int, int, int], str] = {}
    for batch in batches:
        for network, layers in CONV_LAYERS.items():
            for layer in layers:
                m, k, n = layer.gemm_shape(batch)
                if m * k <= max_elements:
                    shapes.setdefault((m, k, n), f"{network} {layer.label} batch {batch}")
    return [(label, m, k, n) for (m, k, n), label in shapes.items()]


def pass_records(m: int, k: int, n: int) -> dict[str, TraceRecord]:
    """The split and add records the cost model prices for an fp32x3 tile GEMM of ``[m x k] @
    [k x n]`` (every tile live: the passes' bytes do not depend on sparsity), by variant."""
    counts = {"nnz": m * k, "tiles_active": 1, "live_rows": m}
    records = candidate_records("tile_sparse", m, k, n, tile=TileShape(16, 16), precision="fp32x3", **counts)
    found = {r.variant: r for r in records if r.kernel == COMPACT and r.variant in PASSES}
    missing = set(PASSES) - set(found)
    if missing:
        raise RuntimeError(f"the fp32x3 records of {m}x{k}x{n} lack {sorted(missing)}: the product's passes changed")
    return found


def measure(label: str, m: int, k: int, n: int, timer, repeats: int) -> list[TraceRecord]:
    """The two passes of one shape timed on the GPU, checked, as records with their times."""
    import cupy as cp

    from spartan_py.sparsity.three_tf32 import split_tf32

    a = cp.random.standard_normal((m, k), dtype=cp.float32)
    w = cp.random.standard_normal((k, n), dtype=cp.float32)
    hi, lo = split_tf32(a)
    if not bool(cp.array_equal(hi + lo, a)):
        raise RuntimeError(f"{label}: the split is not exact")
    del hi, lo
    out = cp.random.standard_normal((m, n), dtype=cp.float32)
    scratch = cp.random.standard_normal((m, n), dtype=cp.float32)
    expected = out + scratch
    out += scratch  # the add pass of summed_product
    if not bool(cp.array_equal(out, expected)):
        raise RuntimeError(f"{label}: the add pass is wrong")
    del expected

    def add():
        nonlocal out
        out += scratch

    work = {"split-tf32": lambda: (split_tf32(a), split_tf32(w)), "add": add}
    device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    records = []
    for variant, record in pass_records(m, k, n).items():
        times = [timer(work[variant], repeats=repeats, warmup=3)["median_us"] for _ in range(2)]
        run = f"fp32x3 {variant}, {label}"
        records.append(replace(record, run=run, layer=1, device=device, measured_us=min(times)))
    return records


def main(argv: list[str] | None = None) -> int:
    """Time the passes on every shape and write the kept trace."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the trace file")
    parser.add_argument("--batches", default="8,32", help="batches, comma-separated")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--max-elements", type=int, default=MAX_ELEMENTS)
    args = parser.parse_args(argv)
    import cupy

    from spartan_py.timing import GpuTimer

    batches = [int(b) for b in args.batches.split(",")]
    shapes = gemm_shapes(batches, args.max_elements)
    log(f"{len(shapes)} shapes at batches {batches}")
    timer = GpuTimer(min_warmup_ms=20)
    records: list[TraceRecord] = []
    for index, (label, m, k, n) in enumerate(shapes, 1):
        records += measure(label, m, k, n, timer, args.repeats)
        cupy.get_default_memory_pool().free_all_blocks()
        times = ", ".join(f"{r.variant} {r.measured_us:.1f} us" for r in records[-2:])
        log(f"[{index}/{len(shapes)}] {label} {m}x{k}x{n}: {times}")
    path = write_trace(args.out / "fp32x3-passes.trace.csv.gz", records)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
