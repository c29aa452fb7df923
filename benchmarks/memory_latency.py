"""The two memory figures the cost model's Little's-law term takes from a GPU it is fitted on:
a dependent DRAM load's latency and the share of the datasheet bandwidth a large copy reaches.

Latency: one thread follows a random cycle of pointers, one per 256-byte line, over a buffer
several times the L2 (each load's address is the previous load's value, so nothing overlaps);
the time per step, CUDA events, median of ``--repeats`` chases after a warm-up chase. Bandwidth:
a device-to-device copy of ``--copy-gib`` GiB, bytes read plus written over the median time.
Run it on the machine the model is calibrated on (never on a GPU whose predictions are
checked blind: that GPU's figures come from its datasheet or published microbenchmarks).

    python -m benchmarks.memory_latency [--buffer-mib 1024] [--steps 200000] [--copy-gib 4] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks.harness import write_result

_CHASE = r"""
extern "C" __global__ void chase(const long long* next, long long start, long long steps, long long* out) {
    long long at = start;
    for (long long i = 0; i < steps; ++i) at = next[at];
    *out = at;  // keeps the loop
}
"""

LINE_WORDS = 32
"""Pointers one line apart (32 x 8 bytes = 256 bytes): each step touches a new line of DRAM."""


def chase_ns(cp, buffer_mib: int, steps: int, repeats: int, seed: int = 0) -> list[float]:
    """Nanoseconds per dependent load, one per repeat."""
    words = buffer_mib * 2**20 // 8
    lines = words // LINE_WORDS
    order = np.random.default_rng(seed).permutation(lines).astype(np.int64) * LINE_WORDS
    host = np.zeros(words, dtype=np.int64)
    host[order] = np.roll(order, -1)  # one cycle through every line, in random order
    nxt = cp.asarray(host)
    out = cp.zeros(1, dtype=cp.int64)
    kernel = cp.RawKernel(_CHASE, "chase")
    start = int(order[0])
    kernel((1,), (1,), (nxt, np.int64(start), np.int64(steps), out))  # warm-up: compile, TLB, clocks
    times = []
    for _ in range(repeats):
        begin, end = cp.cuda.Event(), cp.cuda.Event()
        begin.record()
        kernel((1,), (1,), (nxt, np.int64(start), np.int64(steps), out))
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(begin, end) * 1e6 / steps)
    return times


def copy_gb_s(cp, gib: float, repeats: int) -> list[float]:
    """Bytes read plus written per second of a device-to-device copy, 1e9 bytes/s, one per repeat."""
    n = int(gib * 2**30) // 4
    src = cp.ones(n, dtype=cp.float32)
    dst = cp.empty_like(src)
    dst[...] = src
    rates = []
    for _ in range(repeats):
        begin, end = cp.cuda.Event(), cp.cuda.Event()
        begin.record()
        dst[...] = src
        end.record()
        end.synchronize()
        rates.append(2 * src.nbytes / (cp.cuda.get_elapsed_time(begin, end) * 1e-3) / 1e9)
    return rates


def main(argv: list[str] | None = None) -> int:
    """Measure both figures and write ``memory_latency-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer-mib", type=int, default=1024, help="pointer buffer (default 1024 MiB, 20x the L2)")
    parser.add_argument("--steps", type=int, default=200_000, help="dependent loads per chase")
    parser.add_argument("--copy-gib", type=float, default=4.0, help="copy size (default 4 GiB)")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    import cupy as cp

    from spartan_py.costmodel.machine import load_machine, machine_for_device
    from spartan_py.runner.gpu_facts import gpu_facts

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    latency = chase_ns(cp, args.buffer_mib, args.steps, args.repeats)
    rates = copy_gb_s(cp, args.copy_gib, args.repeats)
    payload = {
        "latency_ns": round(statistics.median(latency), 1),
        "latency_ns_each": [round(v, 1) for v in latency],
        "copy_gb_s": round(statistics.median(rates), 1),
        "copy_gb_s_each": [round(v, 1) for v in rates],
        "buffer_mib": args.buffer_mib,
        "steps": args.steps,
        "copy_gib": args.copy_gib,
        **gpu_facts(),
    }
    name = machine_for_device(device)
    if name is not None:
        datasheet = load_machine(name).specs.memory_bandwidth_gb_s
        payload["machine"] = name
        payload["streaming_efficiency"] = round(payload["copy_gb_s"] / datasheet, 3)
    path = write_result("memory_latency", device, payload)
    print(f"{device}: dependent load {payload['latency_ns']} ns, copy {payload['copy_gb_s']} GB/s -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
