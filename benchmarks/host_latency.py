"""What a host adds to the GPU's time, as the cost model's host files (``sim/hosts/``) describe it.

A timed piece of work whose launches are queued behind other work shows the GPU's own launch
latency only; a host synchronisation inside it adds the round trip: the GPU idles from the end
of the work before the sync until the host, woken, queues the next command. Measured with CUDA
events after a 256 MiB fill that keeps the GPU busy while the host queues (as the runner's
clock does), medians of ``--repeats``:

- ``launch_us``: an empty kernel between two events, queued behind the fill;
- ``sync_us``: an empty kernel, a stream synchronisation on the host, then the closing event,
  less ``launch_us``.

Run it on the host the cost model is calibrated on, and on a host a blind prediction is
compared on, apart from the validation points (a host's latencies describe the host, not the
GPU's performance).

    python -m benchmarks.host_latency [--repeats 200]
"""

from __future__ import annotations

import argparse
import platform
import statistics

from benchmarks.harness import write_result

_EMPTY = r'extern "C" __global__ void empty() {}'


def latencies_us(cp, repeats: int) -> dict[str, list[float]]:
    """``launch_us`` and ``sync_us`` per repeat (microseconds)."""
    kernel = cp.RawKernel(_EMPTY, "empty")
    scratch = cp.empty(64 << 20, dtype=cp.int32)
    stream = cp.cuda.get_current_stream()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(20):  # compile, clocks
        kernel((1,), (32,), ())
    stream.synchronize()
    launch, synced = [], []
    for _ in range(repeats):
        scratch.fill(0)
        start.record()
        kernel((1,), (32,), ())
        stop.record()
        stop.synchronize()
        launch.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
        scratch.fill(0)
        start.record()
        kernel((1,), (32,), ())
        stream.synchronize()
        stop.record()
        stop.synchronize()
        synced.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    base = statistics.median(launch)
    return {"launch_us": launch, "sync_us": [value - base for value in synced]}


def main(argv: list[str] | None = None) -> int:
    """Measure the host's figures and write ``host_latency-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    import cupy as cp

    from spartan_py.runner.gpu_facts import gpu_facts
    from spartan_py.runner.store import cpu_name

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    values = latencies_us(cp, args.repeats)
    payload = {
        **{name: round(statistics.median(v), 3) for name, v in values.items()},
        **{f"{name}_p10_p90": [round(q, 3) for q in statistics.quantiles(v, n=10)[::8]] for name, v in values.items()},
        "repeats": args.repeats,
        "cpu": cpu_name(),
        "platform": platform.platform(),
        **gpu_facts(),
    }
    path = write_result("host_latency", device, payload)
    print(f"{device}: launch {payload['launch_us']} us, sync round trip {payload['sync_us']} us -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
