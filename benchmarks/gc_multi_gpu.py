"""Graph Challenge inference sharded across the GPUs of one machine (one Dask worker per GPU):
time and scaling efficiency against one GPU, same code path, same run.

For each case the rows run as one shard (one GPU), then as one shard per GPU. A shard's time
is its engine's median CUDA-event time over ``--repeats`` replays after warm-up (inputs and
weights on the device, as ``gc_gpu.py``); the sharded inference takes its slowest shard.
Efficiency = one-GPU time / (GPUs x sharded time). Wall time is reported beside it: submit to
merged result, the engines already prepared, each shard's checked run, two warm-ups and the
timed replays included. The merged result must equal the one-GPU
run exactly (categories, live rows and non-zeros per layer), and the truth where given.

    python3 benchmarks/gc_multi_gpu.py --cluster local-cuda --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._results import DEFAULT_DATA, RESULTS, write_result
from spartan_py.executors import gpu_count, open_executor
from spartan_py.shard import infer_sharded


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cases(args) -> list[dict]:
    """The proxy (official network) and the generated cases asked for."""
    out = [
        {
            "name": "proxy 1024x120",
            "network": str(args.data / "neuron1024"),
            "inputs": str(args.data / "sparse-images-1024-proxy60k.tsv.gz"),
            "rows": 60000,
            "layers": None,
            "truth": str(args.data / "neuron1024-l120-categories-proxy60k.tsv"),
        }
    ]
    for case in filter(None, args.generated.split(",")):
        neurons, layers, rows = (int(v) for v in case.split("x"))
        out.append(
            {
                "name": f"generated {neurons}x{layers}",
                "network": f"generated:{neurons}",
                "inputs": f"generated:{rows}",
                "rows": None,
                "layers": layers,
                "truth": None,
            }
        )
    return out


def same(a, b) -> bool:
    return (
        np.array_equal(a.categories, b.categories)
        and a.live_rows_by_layer == b.live_rows_by_layer
        and a.nonzeros_by_layer == b.nonzeros_by_layer
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cluster", default="local-cuda", help="local-cuda, or a scheduler address")
    parser.add_argument("--generated", default="4096x1920x60000", help="NEURONSxLAYERSxROWS, comma-separated")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    gpus = gpu_count()
    if gpus < 2:
        log(f"needs at least 2 GPUs; CuPy sees {gpus}")
        return 2
    rows = []
    with open_executor(args.cluster) as workers:
        log(f"{gpus} GPUs, {workers.description}")
        for case in cases(args):
            common = dict(
                workers=workers,
                backend="gpu",
                layers=case["layers"],
                rows=case["rows"],
                truth=case["truth"],
                repeats=args.repeats,
            )
            started = time.perf_counter()
            infer_sharded(case["network"], case["inputs"], shards=gpus, **{**common, "repeats": 1})  # load, prepare
            log(f"{case['name']}: workers loaded and prepared in {time.perf_counter() - started:.1f} s")
            one = infer_sharded(case["network"], case["inputs"], shards=1, **common)
            many = infer_sharded(case["network"], case["inputs"], shards=gpus, **common)
            row = {
                "case": case["name"],
                "rows": one.rows,
                "neurons": one.neurons,
                "layers": one.layers,
                "gpus": gpus,
                "one_gpu_seconds": one.seconds,
                "sharded_seconds": many.seconds,
                "speedup": one.seconds / many.seconds,
                "efficiency": one.seconds / (gpus * many.seconds),
                "one_gpu_wall_seconds": one.wall_seconds,
                "sharded_wall_seconds": many.wall_seconds,
                "wall_efficiency": one.wall_seconds / (gpus * many.wall_seconds),
                "shard_rows": many.shard_rows,
                "shard_seconds": many.shard_seconds,
                "devices": many.devices,
                "one_gpu_repeat_seconds": one.shard_repeat_seconds[0],
                "sharded_repeat_seconds": many.shard_repeat_seconds,
                "edges_per_second_one_gpu": one.edges_per_second,
                "edges_per_second_sharded": many.edges_per_second,
                "merged_equals_one_gpu": same(one, many),
                "passed_truth_one_gpu": one.passed,
                "passed_truth_sharded": many.passed,
                "categories": int(many.categories.size),
            }
            rows.append(row)
            log(
                f"{case['name']}: 1 GPU {one.seconds * 1e3:.2f} ms, {gpus} GPUs {many.seconds * 1e3:.2f} ms "
                f"(shards {', '.join(f'{s * 1e3:.2f}' for s in many.shard_seconds)} ms), efficiency "
                f"{row['efficiency']:.2f}; equal {row['merged_equals_one_gpu']}, truth {many.passed}"
            )
        description = workers.description
    import cupy

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    path = write_result("gc_multi_gpu", f"{gpus} x {device}", {"executor": description, "cases": rows}, args.out)
    log(f"wrote {path}")
    return 0 if all(r["merged_equals_one_gpu"] and r["passed_truth_sharded"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
