"""Measured GPU traces for calibrating and validating the cost model (issue 5).

Runs the ``gpu`` engine on a set of cases (official and generated networks, several layer
counts, input sizes, tile heights and monitor modes). Per case: one warm-up, then
``--repeats`` runs with CUDA events between launches; each record's ``measured_us`` is the
median over the repeats. Also times the whole run as one CUDA-graph replay (what
``benchmarks/gc_gpu.py`` reports) and a launch + host-sync round trip of an empty kernel.
Writes one trace, ``<out>/traces-<date>.csv`` (the ``run`` column names the case), and a
result file ``traces-<date>.json`` naming each case's role (``calibrate``, or ``holdout``
and what it varies that the calibration set does not).

    python benchmarks/collect_traces.py [--data DIR] [--repeats 9] [--only CASE,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import spartan_py as sp  # noqa: E402
from benchmarks._results import DEFAULT_DATA, RESULTS, write_result  # noqa: E402
from spartan_py.costmodel.families import GC_LAYER
from spartan_py.engines.gpu import GpuEngine  # noqa: E402
from spartan_py.trace import to_frame, write_trace  # noqa: E402

# name: (role, network, layers, inputs, rows, engine options); "official" = the 1024-neuron files
CASES = {
    "official-l120-r60000": ("calibrate", "official", 120, "proxy", 60000, {}),
    "gen1024-l120-r60000": ("calibrate", "generated:1024", 120, "generated", 60000, {}),
    "gen4096-l120-r20000": ("calibrate", "generated:4096", 120, "generated", 20000, {}),
    "gen16384-l120-r6000": ("calibrate", "generated:16384", 120, "generated", 6000, {}),
    "official-l120-r60000-monitor-off": ("holdout: monitor mode", "official", 120, "proxy", 60000, {"monitor": False}),
    "official-l120-r60000-tile8": ("calibrate", "official", 120, "proxy", 60000, {"rows_per_tile": 8}),
    "official-l120-r60000-tile4": ("holdout: tile size", "official", 120, "proxy", 60000, {"rows_per_tile": 4}),
    "official-l120-r6000": ("holdout: input size", "official", 120, "proxy", 6000, {}),
    "official-l120-r20000": ("holdout: input size", "official", 120, "proxy", 20000, {}),
    "gen1024-l480-r60000": ("holdout: layer count", "generated:1024", 480, "generated", 60000, {}),
    "gen1024-l1920-r30000": ("holdout: layer count", "generated:1024", 1920, "generated", 30000, {}),
    "gen4096-l480-r20000": ("holdout: layer count", "generated:4096", 480, "generated", 20000, {}),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_case(data: Path, network_spec: str, layers: int, inputs_spec: str, rows: int):
    if network_spec == "official":
        network = sp.load_network(data / "neuron1024", layers=layers)
        inputs = sp.load_inputs(data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)[:rows]
    else:
        network = sp.resolve_network(network_spec, layers)
        inputs = sp.resolve_inputs(f"generated:{rows}", network.neurons)
    return network, inputs


def graph_replay_seconds(engine: GpuEngine, inputs, repeats: int) -> list[float]:
    batch = engine.upload(inputs)
    for _ in range(3):
        engine.run_device(batch)
    return [engine.run_device(batch) for _ in range(repeats)]


def sync_roundtrip_us(repeats: int = 200) -> float:
    """Host time of launching an empty kernel and waiting for it (median, microseconds)."""
    import cupy as cp

    empty = cp.RawKernel('extern "C" __global__ void empty() {}', "empty")
    stream = cp.cuda.Stream(non_blocking=True)
    times = []
    for _ in range(repeats + 20):
        start = time.perf_counter()
        empty((1,), (32,), (), stream=stream)
        stream.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times[20:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    trace_path = args.out / f"traces-{stamp}.csv"
    traces = []
    chosen = [name for name in CASES if not args.only or name in args.only.split(",")]
    cases, device = {}, "unknown"
    for name in chosen:
        role, network_spec, layers, inputs_spec, rows, options = CASES[name]
        clock = time.perf_counter()
        network, inputs = load_case(args.data, network_spec, layers, inputs_spec, rows)
        engine = GpuEngine(network, **options)
        device = engine.device
        engine.run(inputs, run_id=name)  # warm-up
        frames = [to_frame(engine.run(inputs, run_id=name).trace) for _ in range(args.repeats)]
        trace = frames[0].copy()
        trace["measured_us"] = np.median(np.stack([f["measured_us"].to_numpy() for f in frames]), axis=0)
        traces.append(trace)
        write_trace(trace_path, pd.concat(traces, ignore_index=True))  # after each case: nothing lost
        replay = graph_replay_seconds(engine, inputs, max(args.repeats, 10))
        kernels = trace[trace["kernel"] == GC_LAYER]
        cases[name] = {
            "role": role, "network": network_spec, "layers": layers, "inputs": inputs_spec, "rows": rows,
            "options": options, "launches": int(len(kernels)),
            "per_launch_events_total_us": float(kernels["measured_us"].sum()),
            "graph_replay_median_us": statistics.median(replay) * 1e6,
            "graph_replay_p10_us": float(np.percentile(replay, 10) * 1e6),
            "graph_replay_p90_us": float(np.percentile(replay, 90) * 1e6),
        }  # fmt: skip
        log(f"{name}: {len(kernels)} launches, events sum {cases[name]['per_launch_events_total_us']:.0f} us, "
            f"graph replay {cases[name]['graph_replay_median_us']:.0f} us ({time.perf_counter() - clock:.0f} s)")  # fmt: skip
        del engine
    payload = {"cases": cases, "repeats": args.repeats, "sync_roundtrip_us": sync_roundtrip_us(), "trace": trace_path.name}
    log(f"sync round trip {payload['sync_roundtrip_us']:.1f} us")
    path = write_result("traces", device, payload, args.out)
    log(f"wrote {path} and {trace_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
