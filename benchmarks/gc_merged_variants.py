"""Graph Challenge proxy on ``gpu-merged``: the merged kernel's candidate variants against the default, by turns.

The official 1024 x 120 network on the 60000-row proxy input (issue 76's bar: 0.30 ms with
the fused monitor on an H100, the monitor at most 2% of it). Each variant
(:data:`VARIANTS`, options of :class:`~spartan_py.engines.merged.engine.MergedEngine` from
:mod:`spartan_py.engines.merged.variants`) runs with the monitor ``fused`` and ``off``
(the sweep :data:`SWEEP`). Before any timing every engine is checked: categories against
the truth, values against the CPU engine, and live rows, values, per-layer counts and the
final monitor counts bit for bit against the default kernel's with the same monitor. A
variant whose kernels fail to build, or whose results differ, is recorded as such and not
timed; the others still run. Variants with kernel options are first run in a child process
each (``--probe``) with a time limit, so that a crash or a hang there cannot take this
process's CUDA context with it.

Then every engine that passed is timed by turns (a CUDA graph replay between events a call;
the order reversed every other round), the monitor's cost taken round by round (fused minus
off), and each launch timed on eager runs (events between launches, median of 7).

    python -m benchmarks.gc_merged_variants [--data DIR] [--rounds 300] [--out DIR]
        [--variants default,fused-head,...] [--no-cpu] [--no-probe]

``--out`` defaults to ``$OUT`` when set (a GPU machine's folder that comes back), else
``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import DEFAULT_DATA, RESULTS, ROOT, Sweep, difference, log, take_turns, write_result
from spartan_py.files import atomic_write_text
from spartan_py.files import json_ready as plain

#: label -> MergedEngine keywords (the monitor is the sweep's); "default" is the baseline.
ASYNC = "chain-async-prologue"
EXPAND = "chain-expand-final"
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "fused-head": {"fused_head": True},
    "chain-async": {"kernel_options": (ASYNC,)},  # on the default schedule
    "fused-head+chain-async": {"fused_head": True, "kernel_options": (ASYNC,)},
    "fused-head+chain-async+expand": {"fused_head": True, "kernel_options": (ASYNC, EXPAND)},
    "fused-head+chain-async+expand+pixels": {"fused_head": True, "kernel_options": (ASYNC, EXPAND, "pixels-shared")},
    "fused-head+chain-async+expand+pixels+scatter": {
        "fused_head": True,
        "kernel_options": (ASYNC, EXPAND, "pixels-shared", "scatter-at-once"),
    },
    # the fused head, then fewer and longer tail launches (rows barely die after layer 14)
    "fused-head+chain-async+expand+long-tail": {
        "launch_layers": (6, 4, 14, 32, 32, 32),
        "kernel_options": (ASYNC, EXPAND),
    },
}
BASELINE = "default"
MONITORS = ("fused", "off")
SWEEP = Sweep({"variant": tuple(VARIANTS), "monitor": MONITORS})

#: Issue 76's bars on the proxy: seconds with the monitor on, the monitor's share of that.
BAR_SECONDS = 0.30e-3
BAR_MONITOR_SHARE = 0.02

#: Warm-up runs of each engine before its checks (the first captures its CUDA graph).
WARMUP_RUNS = 3

WORKLOAD = "official 1024 neurons x 120 layers, 60000-row proxy input"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--variants`` is checked against :data:`VARIANTS` (the baseline is
    always run)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=300, help="rounds of turns (each engine once a round)")
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated labels of VARIANTS")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU engine's check of the values")
    parser.add_argument("--no-probe", action="store_true", help="run kernel-option variants in this process directly")
    parser.add_argument("--probe-timeout", type=float, default=240.0, help="seconds a probe may take")
    parser.add_argument(
        "--deadline",
        type=float,
        default=450.0,
        help="seconds after which what was checked so far is written and the run stops",
    )
    parser.add_argument("--probe", metavar="LABEL", help=argparse.SUPPRESS)  # a child: run LABEL once, print JSON
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or (args.probe and args.probe not in VARIANTS):
        parser.error(f"unknown variants {unknown or [args.probe]}; known: {', '.join(VARIANTS)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.variants = [BASELINE, *(name for name in dict.fromkeys(names) if name != BASELINE)]
    return args


def points(variants: Sequence[str]) -> list[dict]:
    """The sweep's points for the chosen ``variants``, in sweep order."""
    return [point for point in SWEEP.points() if point["variant"] in variants]


def key(point: Mapping[str, str]) -> str:
    """An engine's name in the turns and the result: ``variant/monitor``."""
    return f"{point['variant']}/{point['monitor']}"


def compare(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> dict:
    """Bit-for-bit checks of one engine's outputs (``ids``, ``values``, ``counts``, ``nnz``,
    ``tiles``: final monitor counts, or None) against the baseline's with the same monitor."""
    same_ids = np.array_equal(got["ids"], want["ids"])
    result = {
        "same_rows_as_default": bool(same_ids),
        "same_values_as_default": bool(same_ids and np.array_equal(got["values"], want["values"])),
        "same_counts_as_default": bool(np.array_equal(got["counts"], want["counts"])),
        "same_nonzeros_as_default": bool(np.array_equal(got["nnz"], want["nnz"])),
    }
    if got.get("tiles") is not None and want.get("tiles") is not None:
        result["same_monitor_counts_as_default"] = bool(same_ids and np.array_equal(got["tiles"], want["tiles"]))
    return result


def reference_checks(got: Mapping[str, np.ndarray], truth: np.ndarray | None, cpu: Any) -> dict:
    """Checks against the truth file and the CPU engine's output (``cpu``: an
    :class:`~spartan_py.engines.base.EngineOutput`, or None to skip)."""
    result: dict[str, Any] = {
        "categories": int(got["ids"].size),
        "passed_truth": None if truth is None else bool(np.array_equal(got["ids"] + 1, truth)),
        "poison_left": int(np.isnan(got["values"]).sum()),
    }
    if cpu is not None:
        same = np.array_equal(got["ids"], cpu.live_rows)
        result["same_rows_as_cpu"] = bool(same)
        want = cpu.values[cpu.live_rows].toarray() if same else None
        result["max_abs_diff_vs_cpu"] = float(np.abs(got["values"] - want).max()) if same and got["ids"].size else None
    return result


def passed(checks: Mapping[str, Any]) -> bool:
    """Whether every check that ran passed (a difference from the CPU within float rounding:
    at most 1e-4 on values clamped at 32)."""
    flags = [value for name, value in checks.items() if name.startswith(("same_", "passed_")) and value is not None]
    close = checks.get("max_abs_diff_vs_cpu")
    return all(flags) and checks.get("poison_left", 0) == 0 and (close is None or close <= 1e-4)


def check_all(
    chosen: Sequence[dict],
    build: Callable[[str, str], tuple[Any, Any]],
    read: Callable[[Any, Any], dict],
    truth: np.ndarray | None,
    cpu: Any,
    refused: Mapping[str, str],
    records: dict[str, dict] | None = None,
) -> tuple[dict[str, dict], dict[str, tuple[Any, Any]]]:
    """Build, warm up and check every point of ``chosen`` (``build(variant, monitor)`` ->
    (engine, batch); ``read(engine, batch)`` -> outputs); ``refused``: variants a probe
    turned down, with why; ``records``: a dict to fill as the checks go (a watchdog reads it).
    Returns ({key: record}, {key: (engine, batch)} of those that passed). A failure is
    recorded, never raised."""
    records = {} if records is None else records
    ready: dict[str, tuple[Any, Any]] = {}
    baseline: dict[str, dict] = {}
    for point in chosen:
        name = key(point)
        record: dict[str, Any] = {**point, "options": plain(VARIANTS[point["variant"]])}
        records[name] = record
        if point["variant"] in refused:
            record.update(status="refused", error=refused[point["variant"]])
            continue
        try:
            engine, batch = build(point["variant"], point["monitor"])
            for _ in range(WARMUP_RUNS):
                engine.run_device(batch)
            got = read(engine, batch)
        except Exception as error:  # a build or run failure is this variant's result
            record.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
            log(f"{name}: failed: {record['error'][:300]}")
            continue
        record["layers_per_launch"] = list(getattr(engine, "chunks", []))
        record.update(reference_checks(got, truth, cpu))
        if point["variant"] == BASELINE:
            baseline[point["monitor"]] = got
        elif point["monitor"] in baseline:
            record.update(compare(got, baseline[point["monitor"]]))
        ok = passed(record)
        record["status"] = "passed" if ok else "wrong"
        if ok:
            ready[name] = (engine, batch)
        log(f"{name}: {record['status']} ({record.get('categories')} categories)")
    return records, ready


def summarise(
    records: dict[str, dict], times: Mapping[str, Sequence[float]], launches: Mapping[str, list[float]]
) -> dict:
    """Fill ``records`` with each timed engine's median, spread, ratio to the default with the
    same monitor, its launches' times and (fused) the monitor's cost; return the bars."""
    for name, values in times.items():
        record = records[name]
        record.update(
            median_seconds=float(np.median(values)),
            p10_seconds=float(np.percentile(values, 10)),
            p90_seconds=float(np.percentile(values, 90)),
            rounds=len(values),
            launch_seconds=launches.get(name),
        )
        base = f"{BASELINE}/{record['monitor']}"
        if base in times:
            record["vs_default"] = record["median_seconds"] / float(np.median(times[base]))
        off = f"{record['variant']}/off"
        if record["monitor"] == "fused" and off in times:
            diff = difference(times, name, off)
            record["monitor_extra_seconds"] = diff["median"]
            record["monitor_extra_p10_p90_seconds"] = [diff["p10"], diff["p90"]]
            record["monitor_share_of_fused"] = diff["median"] / record["median_seconds"]
    fused = {n: r for n, r in records.items() if r["monitor"] == "fused" and "median_seconds" in r}
    best = min(fused, key=lambda n: fused[n]["median_seconds"], default=None)
    bars: dict[str, Any] = {"bar_seconds": BAR_SECONDS, "bar_monitor_share": BAR_MONITOR_SHARE, "fastest_fused": best}
    if best is not None:
        bars["fastest_fused_seconds"] = fused[best]["median_seconds"]
        bars["meets_time_bar"] = fused[best]["median_seconds"] <= BAR_SECONDS
        share = fused[best].get("monitor_share_of_fused")
        bars["meets_monitor_bar"] = None if share is None else share <= BAR_MONITOR_SHARE
    return bars


def summary_lines(records: Mapping[str, dict], bars: Mapping[str, Any]) -> list[str]:
    """The run in a few lines: one per engine, then the bars."""
    lines = [f"{'engine':48} {'status':8} {'median us':>10} {'vs default':>10} {'monitor':>9}"]
    for name, r in records.items():
        median = f"{r['median_seconds'] * 1e6:10.1f}" if "median_seconds" in r else f"{'-':>10}"
        ratio = f"{r['vs_default']:10.3f}" if "vs_default" in r else f"{'-':>10}"
        share = f"{r['monitor_share_of_fused'] * 100:8.2f}%" if "monitor_share_of_fused" in r else f"{'-':>9}"
        lines.append(f"{name:48} {r['status']:8} {median} {ratio} {share}")
        if r.get("error"):
            lines.append(f"    {r['error'][:200]}")
    lines.append(
        f"fastest fused: {bars.get('fastest_fused')} "
        f"{bars.get('fastest_fused_seconds', float('nan')) * 1e6:.1f} us; "
        f"bar {BAR_SECONDS * 1e6:.0f} us met: {bars.get('meets_time_bar')}; "
        f"monitor <= {BAR_MONITOR_SHARE:.0%} met: {bars.get('meets_monitor_bar')}"
    )
    return lines


def probe_refusals(args: argparse.Namespace) -> dict[str, str]:
    """Run each chosen variant with kernel options once in a child process of its own
    (``--probe``), at once; {variant: why} for those that crashed, hung or were wrong (a
    variant sharing another's kernel options shares its probe)."""
    by_options: dict[tuple, str] = {}
    for name in args.variants:
        options = tuple(VARIANTS[name].get("kernel_options", ()))
        if options:
            by_options.setdefault(options, name)

    def run(label: str) -> tuple[str, str | None]:
        command = [sys.executable, "-m", "benchmarks.gc_merged_variants", "--probe", label, "--data", str(args.data)]
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.probe_timeout)
        except subprocess.TimeoutExpired:
            return label, f"probe ran past {args.probe_timeout:.0f} s"
        last = (done.stdout.strip().splitlines() or [""])[-1]
        try:
            verdict = json.loads(last)
        except json.JSONDecodeError:
            return label, f"probe exited {done.returncode}: {done.stderr.strip()[-1500:]}"
        return label, None if verdict.get("ok") else f"probe: {verdict}"

    with ThreadPoolExecutor(max_workers=max(len(by_options), 1)) as pool:
        verdicts = dict(pool.map(run, by_options.values()))
    return {
        name: why
        for name in args.variants
        if (options := tuple(VARIANTS[name].get("kernel_options", ()))) and (why := verdicts[by_options[options]])
    }


def finish(
    records: dict[str, dict],
    times: Mapping[str, Sequence[float]],
    launches: Mapping[str, list[float]],
    device: str,
    args: argparse.Namespace,
) -> Path:
    """Summarise, write ``gc_merged_variants-<date>.json`` under ``args.out`` (with the device,
    date, commit and command), print the summary; returns the file's path."""
    bars = summarise(records, times, launches)
    payload = {
        "workload": WORKLOAD,
        "rounds": args.rounds,
        "bars": bars,
        "engines": list(records.values()),
        "times_seconds": {name: list(values) for name, values in times.items()},
    }
    path = write_result("gc_merged_variants", device, payload, args.out)
    print("\n".join(summary_lines(records, bars)), flush=True)
    log(f"wrote {path}")
    return path


def watchdog(seconds: float, out: Path, state: dict) -> threading.Timer:
    """After ``seconds``, write ``state`` (the phase and the records so far) to
    ``out/gc_merged_variants-unfinished.json`` and end the process (SIGTERM: the main thread
    may be waiting on a hung kernel): a hung kernel must not cost the checks already made."""

    def fire() -> None:
        out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(plain({"stopped_after_seconds": seconds, **state}), indent=1, default=str)
        atomic_write_text(out / "gc_merged_variants-unfinished.json", text)
        log(f"stopped after {seconds:.0f} s in phase {state.get('phase')}")
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: Sequence[str] | None = None) -> int:
    """Probe, check, time by turns and write ``gc_merged_variants-<date>.json``; print the summary."""
    args = parse_args(argv)
    # optional dependency and the GPU engines: only a GPU run gets here (the tests drive the
    # functions above with fakes)
    from benchmarks._merged_variants_gpu import GpuSide

    if args.probe:
        verdict = {"variant": args.probe, **GpuSide(args.data, cpu=False).probe(VARIANTS[args.probe])}
        print(json.dumps(verdict), flush=True)
        return 0
    state: dict[str, Any] = {"phase": "probes and set-up", "records": {}}
    timer = watchdog(args.deadline, args.out, state)
    with ThreadPoolExecutor(max_workers=1) as pool:
        refusals = pool.submit(probe_refusals, args) if not args.no_probe else None
        side = GpuSide(args.data, cpu=not args.no_cpu)
        refused = refusals.result() if refusals is not None else {}
    chosen = points(args.variants)
    state.update(phase="checks", refused=refused)
    records, ready = check_all(
        chosen,
        lambda variant, monitor: side.build(VARIANTS[variant], monitor),
        side.read,
        side.truth,
        side.cpu,
        refused,
        state["records"],
    )
    state["phase"] = "timing"
    log(f"timing {len(ready)} engines by turns, {args.rounds} rounds")
    cases = {name: (lambda pair=pair: pair[0].run_device(pair[1])) for name, pair in ready.items()}
    times = take_turns(cases, rounds=args.rounds)
    launches = {name: side.launch_times(*pair) for name, pair in ready.items()}
    finish(records, times, launches, side.device, args)
    timer.cancel()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
