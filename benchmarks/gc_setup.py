"""Set-up time and host memory of a large Graph Challenge run: generated, then from files.

1. ``generated:N`` with ``--layers`` layers and ``--rows`` generated input rows: the seconds
   to generate the inputs, to prepare the engine ``auto`` picks (the network's layers are
   built, merged and uploaded there, on every core), and one inference; the process's peak
   resident memory (VmHWM) after each step.
2. The same network's first ``--file-layers`` layers written in the official TSV format
   (``write_network``) under ``--scratch``, then loaded (``load_network``) and prepared the
   same way, in turn with the same layers generated afresh (built on every core) and
   prepared, ``--repeats`` times after a warm-up (medians): seconds per layer of each step.
   (A whole 65536 x 1920 network
   is ~75 GB of TSV, more than the GPU hosts' disk; the per-layer rate is what compares.)

    python benchmarks/gc_setup.py [--neurons 65536] [--layers 1920] [--rows 60000]
        [--file-layers 120] [--repeats 5] [--files-only] [--scratch DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import spartan_py as sp
from benchmarks._results import RESULTS, write_result


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


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
        return files, device
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--neurons", type=int, default=65536)
    parser.add_argument("--layers", type=int, default=1920)
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--file-layers", type=int, default=120, help="layers written and read as TSV (0: skip)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the TSV comparison")
    parser.add_argument("--files-only", action="store_true", help="only the TSV comparison (part 2)")
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the TSV files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.files_only and not args.file_layers:
        parser.error("--files-only needs --file-layers above 0")

    generated: dict = {}
    inputs = _timed("inputs", generated, lambda: sp.generate_inputs(args.rows, args.neurons, seed=0))
    result: dict = {"neurons": args.neurons, "rows": args.rows}
    device = ""
    if not args.files_only:
        network = sp.generate_network(args.neurons, args.layers, seed=0)
        engine = _timed("prepare", generated, lambda: sp.make_engine("auto", network))
        output = _timed("first_inference", generated, lambda: engine.run(inputs))
        setup = generated["inputs"]["seconds"] + generated["prepare"]["seconds"]
        result.update(
            layers=args.layers,
            backend=engine.name,
            generated=generated,
            setup_seconds=setup,
            inference_seconds=output.seconds,
            categories=int(output.live_rows.size),
        )
        print(f"generated {args.neurons} x {args.layers}, {args.rows} rows on {engine.name}: set-up {setup:.1f} s")
        device = engine.device
        del engine, output, network
    if args.file_layers:
        result["files"], device = compare_files(args, inputs)
    path = write_result("gc_setup", device, result, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
