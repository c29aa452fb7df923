"""Set-up time and host memory of large Graph Challenge runs: generated, then from files.

1. Each generated network of ``--networks`` (default ``--neurons`` x ``--layers``; ``all``:
   the twelve of ``experiments/graph-challenge-all.yaml``, 1024-65536 neurons x 120-1920
   layers) with ``--rows`` generated input rows, cold (nothing prepared is kept between
   networks; Numba's and CuPy's compiled-kernel caches are warm after the first): the seconds
   to generate the inputs (load), to prepare the engine ``auto`` picks (the network's layers
   worked out, merged and uploaded there, on every core), and one inference (its CUDA-event
   seconds and its wall time, final rows included); the peak resident memory of each (VmHWM,
   reset before each network) and the device memory pool's bytes after it.
2. ``--cli-repeats`` whole ``spartan infer`` commands on the largest network, each a new
   process: the wall time a user waits, and the load / prepare / inference seconds it prints.
3. The same network's first ``--file-layers`` layers written in the official TSV format
   (``write_network``) under ``--scratch``, then loaded (``load_network``) and prepared the
   same way, in turn with the same layers generated afresh (built on every core) and
   prepared, ``--repeats`` times after a warm-up (medians): seconds per layer of each step.
   (A whole 65536 x 1920 network
   is ~75 GB of TSV, more than the GPU hosts' disk; the per-layer rate is what compares.)
   Then the floor: with the page cache dropped (``/proc/sys/vm/drop_caches``, where this user
   may write it), the seconds to read the files' bytes and nothing more, and to load them
   (``load_network``) from the disk, per layer.

    python benchmarks/gc_setup.py [--networks all|NxL,...] [--neurons 65536] [--layers 1920]
        [--rows 60000] [--cli-repeats 2] [--file-layers 120] [--repeats 5] [--files-only]
        [--scratch DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import spartan_py as sp
from benchmarks.harness import RESULTS, write_result


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


#: The twelve networks of experiments/graph-challenge-all.yaml (neurons, layers).
ALL_NETWORKS = [(n, layers) for n in (1024, 4096, 16384, 65536) for layers in (120, 480, 1920)]


def reset_peak_rss() -> None:
    """Start VmHWM afresh (Linux: ``5`` into ``/proc/self/clear_refs``), so that each
    network's peak is its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def device_pool_bytes() -> int | None:
    """Bytes CuPy's device memory pool holds (None without CuPy)."""
    try:
        import cupy
    except ImportError:
        return None
    return int(cupy.get_default_memory_pool().total_bytes())


def one_network(neurons: int, layers: int, rows: int) -> dict:
    """Load (generate the inputs), prepare and run once one generated network, cold."""
    reset_peak_rss()
    log: dict = {}
    inputs = _timed(f"{neurons}x{layers} load", log, partial(sp.generate_inputs, rows, neurons, seed=0))
    network = sp.generate_network(neurons, layers, seed=0)
    engine = _timed(f"{neurons}x{layers} prepare", log, partial(sp.make_engine, "auto", network))
    output = _timed(f"{neurons}x{layers} first inference", log, partial(engine.run, inputs))
    entry = {
        "neurons": neurons,
        "layers": layers,
        "rows": rows,
        "backend": engine.name,
        "device": engine.device,
        "load_seconds": log[f"{neurons}x{layers} load"]["seconds"],
        "prepare_seconds": log[f"{neurons}x{layers} prepare"]["seconds"],
        "inference_seconds": output.seconds,
        "run_wall_seconds": log[f"{neurons}x{layers} first inference"]["seconds"],
        "categories": int(output.live_rows.size),
        "peak_rss_bytes": peak_rss_bytes(),
        "device_pool_bytes": device_pool_bytes(),
    }
    del engine, output, network, inputs
    try:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    except ImportError:
        pass
    return entry


def whole_command(neurons: int, layers: int, rows: int) -> dict:
    """One ``spartan infer`` in a new process on a generated network: its wall seconds, what it
    printed of load, prepare and inference, and its peak resident memory."""
    command = [
        sys.executable, "-m", "spartan_py", "infer", "--network", f"generated:{neurons}", "--layers", str(layers),
        "--inputs", f"generated:{rows}", "--backend", "auto", "--json", "--quiet",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    printed = json.loads(done.stdout)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    entry = {
        "command": "spartan " + " ".join(command[3:]),
        "wall_seconds": wall,
        **{key: printed[key] for key in ("load_seconds", "prepare_seconds", "seconds", "categories")},
        "peak_rss_bytes": peak * 1024 if peak > before else None,  # ru_maxrss: the largest child so far, KiB
    }
    print(f"spartan infer {neurons} x {layers}: {wall:.1f} s wall", flush=True)
    return entry


def _timed(step: str, log: dict, action):
    started = time.perf_counter()
    value = action()
    log[step] = {"seconds": time.perf_counter() - started, "peak_rss_bytes": peak_rss_bytes()}
    print(f"{step}: {log[step]['seconds']:.1f} s, peak RSS {log[step]['peak_rss_bytes'] / 2**30:.1f} GiB", flush=True)
    return value


def build_layers(network) -> list:
    """Every layer of a generated network built, on every core (as ``load_network`` reads files)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(network.weights.__getitem__, range(network.layers)))


def compare_files(args, inputs) -> tuple[dict, str]:
    """The TSV part (module docstring, 2). After a warm-up round (CUDA context, kernels), each
    of ``--repeats`` rounds loads the TSV layers and prepares the engine, then builds the same
    layers generated afresh and prepares the engine on them; medians of the rounds. Loading
    and building both end in the same CSR layers, so they compare like for like; the two
    prepares do the same work (their difference is the host's noise). Returns the figures and
    the device the engines ran on."""
    scratch = Path(tempfile.mkdtemp(dir=args.scratch))
    try:
        files: dict = {}
        part = sp.generate_network(args.neurons, args.file_layers, seed=0)
        _timed("write_tsv", files, partial(sp.write_network, part, scratch / "network"))
        del part
        files["tsv_bytes"] = sum(p.stat().st_size for p in (scratch / "network").iterdir())
        rounds: list[dict] = []
        same = True
        for number in range(args.repeats + 1):
            log: dict = {}
            loaded = _timed("load_tsv", log, partial(sp.load_network, scratch / "network"))
            engine = _timed("prepare_loaded", log, partial(sp.make_engine, "auto", loaded))
            loaded_rows = engine.run(inputs).live_rows
            device = engine.device
            del engine, loaded
            fresh = sp.generate_network(args.neurons, args.file_layers, seed=0)  # nothing built yet
            _timed("build_generated", log, partial(build_layers, fresh))
            engine = _timed("prepare_generated", log, partial(sp.make_engine, "auto", fresh))
            generated_rows = engine.run(inputs).live_rows
            del engine, fresh
            same &= bool(loaded_rows.size == generated_rows.size and (loaded_rows == generated_rows).all())
            if number:  # round 0 warms up
                rounds.append(log)
            print(f"round {number} of {args.repeats} done (0: warm-up)", flush=True)

        def per_layer(step: str) -> float:
            return statistics.median(r[step]["seconds"] for r in rounds) / args.file_layers

        files.update(
            rounds=rounds,
            same_categories_as_generated=same,
            layers=args.file_layers,
            **{f"{step}_seconds_per_layer": per_layer(step) for step in rounds[0]},
        )
        print(
            f"TSV: {files['tsv_bytes'] / 1e9:.1f} GB for {args.file_layers} layers. Per layer (medians of "
            f"{args.repeats}): load {per_layer('load_tsv') * 1e3:.1f} ms against "
            f"{per_layer('build_generated') * 1e3:.1f} ms to generate; then prepare "
            f"{per_layer('prepare_loaded') * 1e3:.1f} ms loaded, "
            f"{per_layer('prepare_generated') * 1e3:.1f} ms generated"
        )
        files["cold"] = cold_reads(scratch / "network", args.file_layers)
        return files, device
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _drop_page_cache() -> str | None:
    """Empty the page cache (None), or the reason it cannot be."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return None
    except OSError as exc:
        return f"cannot drop the page cache: {exc}"


def cold_reads(folder: Path, layers: int) -> dict:
    """Per layer, from the disk (page cache dropped before each): the files' bytes read into one
    buffer (the disk's floor), then the folder loaded by ``load_network``; or why not."""
    reason = _drop_page_cache()
    if reason:
        print(f"cold reads skipped: {reason}", flush=True)
        return {"skipped": reason}
    paths = sorted(folder.iterdir())
    buffer = bytearray(64 << 20)
    started = time.perf_counter()
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                total += count
    read_seconds = time.perf_counter() - started
    _drop_page_cache()
    started = time.perf_counter()
    sp.load_network(folder)
    load_seconds = time.perf_counter() - started
    out = {
        "bytes": total,
        "read_seconds_per_layer": read_seconds / layers,
        "load_seconds_per_layer": load_seconds / layers,
        "disk_gb_per_s": total / read_seconds / 1e9,
        "load_over_read": load_seconds / read_seconds,
    }
    print(
        f"from the disk, per layer: read {out['read_seconds_per_layer'] * 1e3:.1f} ms "
        f"({out['disk_gb_per_s']:.2f} GB/s), load {out['load_seconds_per_layer'] * 1e3:.1f} ms "
        f"({out['load_over_read']:.2f}x the read)",
        flush=True,
    )
    return out


def _networks(text: str | None, neurons: int, layers: int) -> list[tuple[int, int]]:
    if text is None:
        return [(neurons, layers)]
    if text == "all":
        return ALL_NETWORKS
    return [(int(n), int(layer_count)) for n, layer_count in (item.split("x") for item in text.split(","))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", default=None, help="all, or NxL,NxL,... (default: --neurons x --layers)")
    parser.add_argument("--neurons", type=int, default=65536)
    parser.add_argument("--layers", type=int, default=1920)
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--cli-repeats", type=int, default=2, help="whole `spartan infer` runs on the largest network")
    parser.add_argument("--file-layers", type=int, default=120, help="layers written and read as TSV (0: skip)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the TSV comparison")
    parser.add_argument("--files-only", action="store_true", help="only the TSV comparison (part 3)")
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the TSV files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.files_only and not args.file_layers:
        parser.error("--files-only needs --file-layers above 0")

    result: dict = {"rows": args.rows}
    device = ""
    if not args.files_only:
        networks = _networks(args.networks, args.neurons, args.layers)
        result["networks"] = [one_network(n, layers, args.rows) for n, layers in networks]
        device = result["networks"][-1]["device"]
        largest = max(networks, key=lambda pair: pair[0] * pair[1])
        result["commands"] = [whole_command(*largest, args.rows) for _ in range(args.cli_repeats)]
    if args.file_layers:
        inputs = sp.generate_inputs(args.rows, args.neurons, seed=0)
        result["neurons"] = args.neurons
        result["files"], device = compare_files(args, inputs)
    path = write_result("gc_setup", device, result, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
