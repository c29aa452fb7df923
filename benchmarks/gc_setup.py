"""Set-up time and host memory of a large Graph Challenge run: generated, then from files.

1. ``generated:N`` with ``--layers`` layers and ``--rows`` generated input rows: the seconds
   to generate the inputs, to prepare the engine ``auto`` picks (the network's layers are
   built, merged and uploaded there, on every core), and one inference; the process's peak
   resident memory (VmHWM) after each step.
2. The same network's first ``--file-layers`` layers written in the official TSV format
   (``write_network``) under ``--scratch``, then loaded (``load_network``) and prepared the
   same way, against the same layers generated afresh and prepared, in turn, ``--repeats``
   times (medians): seconds per layer of each. (A whole 65536 x 1920 network
   is ~75 GB of TSV, more than the GPU hosts' disk; the per-layer rate is what compares.)

    python benchmarks/gc_setup.py [--neurons 65536] [--layers 1920] [--rows 60000]
        [--file-layers 120] [--repeats 3] [--files-only] [--scratch DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
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


def compare_files(args, inputs) -> dict:
    """The TSV part (module docstring, 2): ``--repeats`` rounds, each loading and preparing the
    TSV layers, then generating and preparing the same layers afresh; medians of the rounds."""
    scratch = Path(tempfile.mkdtemp(dir=args.scratch))
    try:
        files: dict = {}
        part = sp.generate_network(args.neurons, args.file_layers, seed=0)
        _timed("write_tsv", files, partial(sp.write_network, part, scratch / "network"))
        del part
        files["tsv_bytes"] = sum(p.stat().st_size for p in (scratch / "network").iterdir())
        rounds: list[dict] = []
        same = True
        for number in range(args.repeats):
            log: dict = {}
            loaded = _timed("load_tsv", log, partial(sp.load_network, scratch / "network"))
            engine = _timed("prepare_loaded", log, partial(sp.make_engine, "auto", loaded))
            loaded_rows = engine.run(inputs).live_rows
            del engine, loaded
            fresh = sp.generate_network(args.neurons, args.file_layers, seed=0)  # nothing built yet
            engine = _timed("prepare_generated", log, partial(sp.make_engine, "auto", fresh))
            generated_rows = engine.run(inputs).live_rows
            del engine, fresh
            same &= bool(loaded_rows.size == generated_rows.size and (loaded_rows == generated_rows).all())
            rounds.append(log)
            print(f"round {number + 1} of {args.repeats} done", flush=True)

        def median(step: str) -> float:
            return statistics.median(r[step]["seconds"] for r in rounds)

        per_layer_files = (median("load_tsv") + median("prepare_loaded")) / args.file_layers
        per_layer_generated = median("prepare_generated") / args.file_layers
        files.update(
            rounds=rounds,
            same_categories_as_generated=same,
            layers=args.file_layers,
            load_seconds_per_layer=median("load_tsv") / args.file_layers,
            seconds_per_layer=per_layer_files,
            generated_seconds_per_layer=per_layer_generated,
        )
        print(
            f"TSV: {files['tsv_bytes'] / 1e9:.1f} GB for {args.file_layers} layers; load + prepare "
            f"{per_layer_files * 1e3:.0f} ms a layer against {per_layer_generated * 1e3:.0f} ms for the same "
            f"layers generated (medians of {args.repeats})"
        )
        return files
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--neurons", type=int, default=65536)
    parser.add_argument("--layers", type=int, default=1920)
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--file-layers", type=int, default=120, help="layers written and read as TSV (0: skip)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the TSV comparison")
    parser.add_argument("--files-only", action="store_true", help="only the TSV comparison (part 2)")
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the TSV files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    generated: dict = {}
    inputs = _timed("inputs", generated, lambda: sp.generate_inputs(args.rows, args.neurons, seed=0))
    result: dict = {"neurons": args.neurons, "rows": args.rows}
    device = None
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
        result["files"] = compare_files(args, inputs)
    if device is None:
        device = sp.make_engine("auto", sp.generate_network(args.neurons, 1, seed=0)).device
    path = write_result("gc_setup", device, result, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
