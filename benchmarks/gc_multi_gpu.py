"""Graph Challenge inference sharded across the GPUs of one machine (one Dask worker per GPU):
time, scaling efficiency and GPU memory against one GPU, same code path, same run.

For each case the rows run as one shard per GPU for each GPU count asked for (``--gpus``,
largest first, so that each count's memory figure is its own: a worker's pool only grows),
one GPU last. A shard's time is its engine's median CUDA-event time over ``--repeats``
replays after warm-up (inputs and weights on the device, as ``gc_gpu.py``); the sharded
inference takes its slowest shard. Efficiency = one-GPU time / (GPUs x sharded time). Wall
time is reported beside it: submit to merged result, the engines already prepared, each
shard's checked run, two warm-ups and the timed replays included. Each shard names its GPU
(index and PCI bus id) and the bytes CuPy's memory pool holds there after its runs (the
engine's weights and the most its runs needed at once). Every merged result must equal the
one-GPU run exactly (categories, live rows and non-zeros per layer), and the truth where
given. The result file is written after each case, so an interrupted run keeps what it did.

``--balance work,count`` runs each GPU count with the rows dealt by predicted work (the default,
:func:`spartan_py.scale_out.rows.shard_rows`) and in contiguous blocks, each against the same one-GPU run.

``--by-turns`` runs on one GPU: each count's shards one after another in this process, on one
engine (each shard what one GPU of that many would run; no Dask, so wall times are the
turns' sum and say nothing of a real fan-out). The efficiency it gives leaves out what
GPUs running at once would share (the host, PCIe, power): a forecast, not the measurement.

    python -m benchmarks.gc_multi_gpu --cluster local-cuda --gpus 1,2,4 \
        --generated 16384x1920x60000,65536x1920x60000 --repeats 20 --out benchmarks/results
    python -m benchmarks.gc_multi_gpu --by-turns --gpus 1,2,4 --generated 65536x1920x60000 --no-proxy
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import DEFAULT_DATA, RESULTS, log, write_result
from spartan_py.host.executors import gpu_count, open_executor
from spartan_py.scale_out.rows import DEFAULT_BALANCE
from spartan_py.scale_out.shard import infer_sharded, release_engines


def cases(args) -> list[dict]:
    """The proxy (official network, unless ``--no-proxy``) and the generated cases asked for."""
    out: list[dict] = []
    if not args.no_proxy:
        out.append(
            {
                "name": "proxy 1024x120",
                "network": str(args.data / "neuron1024"),
                "inputs": str(args.data / "sparse-images-1024-proxy60k.tsv.gz"),
                "rows": 60000,
                "layers": None,
                "truth": str(args.data / "neuron1024-l120-categories-proxy60k.tsv"),
            }
        )
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


def gpu_counts(text: str, gpus: int) -> list[int]:
    """The GPU counts to run, largest first, one GPU always included (the baseline)."""
    counts = {int(v) for v in text.split(",") if v.strip()} | {1}
    if max(counts) > gpus or min(counts) < 1:
        raise SystemExit(f"--gpus {text}: this machine has {gpus} GPUs")
    return sorted(counts, reverse=True)


def compare(case: dict, one, many, gpus: int) -> dict:
    """One GPU count's figures against the one-GPU run of the same case."""
    return {
        "case": case["name"],
        "balance": many.balance,
        "rows": one.rows,
        "neurons": one.neurons,
        "layers": one.layers,
        "backend": many.backend,
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
        "shard_row_layers": many.shard_row_layers,
        "devices": many.devices,
        "shard_gpus": many.shard_gpus,
        "shard_gpu_bytes": many.shard_gpu_bytes,
        "one_gpu_gpu_bytes": one.shard_gpu_bytes[0],
        "one_gpu_repeat_seconds": one.shard_repeat_seconds[0],
        "sharded_repeat_seconds": many.shard_repeat_seconds,
        "edges_per_second_one_gpu": one.edges_per_second,
        "edges_per_second_sharded": many.edges_per_second,
        "merged_equals_one_gpu": same(one, many),
        "passed_truth_one_gpu": one.passed,
        "passed_truth_sharded": many.passed,
        "categories": int(many.categories.size),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cluster", default="local-cuda", help="local-cuda, or a scheduler address")
    parser.add_argument("--generated", default="4096x1920x60000", help="NEURONSxLAYERSxROWS, comma-separated")
    parser.add_argument("--gpus", default="", help="GPU counts to run, comma-separated (default: 1 and all)")
    parser.add_argument("--backend", default="auto", help="engine of every shard (default: auto)")
    parser.add_argument("--no-proxy", action="store_true", help="skip the official network's proxy")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--balance", default=DEFAULT_BALANCE, help="how the rows are split: work, count, or both (work,count)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--by-turns", action="store_true", help="one GPU: each count's shards in turn in this process (see above)"
    )
    args = parser.parse_args()
    gpus = gpu_count()
    if gpus < (1 if args.by_turns else 2):
        log(f"needs at least {1 if args.by_turns else 2} GPUs; CuPy sees {gpus}")
        return 2
    counts = gpu_counts(args.gpus or str(gpus), 1 << 16 if args.by_turns else gpus)
    balances = [b for b in args.balance.split(",") if b]
    if args.by_turns:
        gpus = max(counts)  # shards of the set-up run below, all on GPU 0
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    device = f"1 x {name} (shards by turns)" if args.by_turns else f"{gpus} x {name}"
    rows: list[dict] = []
    setups: list[dict] = []
    path = None
    with open_executor(None if args.by_turns else args.cluster) as workers:
        log(f"{gpus} GPUs, {workers.description}; GPU counts {counts}")
        for case in cases(args):
            common = dict(
                workers=workers,
                backend=args.backend,
                layers=case["layers"],
                rows=case["rows"],
                truth=case["truth"],
                repeats=args.repeats,
            )
            started = time.perf_counter()
            first = infer_sharded(case["network"], case["inputs"], shards=gpus, **{**common, "repeats": 1})
            setup = {
                "case": case["name"],
                "gpus": gpus,
                "wall_seconds": time.perf_counter() - started,  # load, prepare, one run per shard
                "shared_preparation": first.shared_preparation,
                "prepare_seconds": first.prepare_seconds,
                "shard_setup_seconds": first.shard_setup_seconds,
                "shard_run_seconds": first.shard_seconds,
            }
            setups.append(setup)
            log(
                f"{case['name']}: {gpus} shards set up in {setup['wall_seconds']:.1f} s (merged once here: "
                f"{first.prepare_seconds:.1f} s; shards {', '.join(f'{t:.1f}' for t in first.shard_setup_seconds)} s)"
            )
            runs = {
                (balance, n): infer_sharded(case["network"], case["inputs"], shards=n, balance=balance, **common)
                for n in counts[:-1]
                for balance in balances
            }
            one = infer_sharded(case["network"], case["inputs"], shards=1, **common)
            for (balance, n), many in runs.items():
                row = compare(case, one, many, n)
                rows.append(row)
                shards = ", ".join(f"{t * 1e3:.2f}" for t in many.shard_seconds)
                memory = ", ".join(f"{b / 1e9:.1f}" for b in many.shard_gpu_bytes)
                log(
                    f"{case['name']} ({row['backend']}, rows by {balance}): 1 GPU {one.seconds * 1e3:.2f} ms, "
                    f"{n} GPUs {many.seconds * 1e3:.2f} ms (shards {shards} ms), efficiency {row['efficiency']:.2f}; "
                    f"equal {row['merged_equals_one_gpu']}, truth {many.passed}; GPU GB {memory} "
                    f"(1 GPU {one.shard_gpu_bytes[0] / 1e9:.1f})"
                )
            payload = {
                "executor": workers.description,
                "by_turns": args.by_turns,
                "gpu_counts": counts,
                "setup": setups,
                "cases": rows,
            }
            written = write_result("gc_multi_gpu", device, payload, args.out)
            if path is not None and path != written:
                path.unlink()  # the previous case's file: this one holds it too
            path = written
            log(f"wrote {path}")
            if workers.client is not None:
                workers.client.run(release_engines)  # the next case's memory figures are its own
    return 0 if all(r["merged_equals_one_gpu"] and r["passed_truth_sharded"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
