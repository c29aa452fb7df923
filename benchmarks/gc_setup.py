"""Set-up time and host memory of a large Graph Challenge run: generated, then from files.

1. ``generated:N`` with ``--layers`` layers and ``--rows`` generated input rows: the seconds
   to generate the inputs, to prepare the engine ``auto`` picks (the network's layers are
   built, merged and uploaded there, on every core), and one inference; the process's peak
   resident memory (VmHWM) after each step.
2. The same network's first ``--file-layers`` layers written in the official TSV format
   (``write_network``) under ``--scratch``, then loaded (``load_network``) and prepared the
   same way: seconds per layer next to the generated path's, for all its layers and for the
   same ``--file-layers`` layers generated in this process. (A whole 65536 x 1920 network
   is ~75 GB of TSV, more than the GPU hosts' disk; the per-layer rate is what compares.)

    python benchmarks/gc_setup.py [--neurons 65536] [--layers 1920] [--rows 60000]
        [--file-layers 120] [--scratch DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--neurons", type=int, default=65536)
    parser.add_argument("--layers", type=int, default=1920)
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--file-layers", type=int, default=120, help="layers written and read as TSV (0: skip)")
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the TSV files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    generated: dict = {}
    network = sp.generate_network(args.neurons, args.layers, seed=0)
    inputs = _timed("inputs", generated, lambda: sp.generate_inputs(args.rows, args.neurons, seed=0))
    engine = _timed("prepare", generated, lambda: sp.make_engine("auto", network))
    output = _timed("first_inference", generated, lambda: engine.run(inputs))
    setup = generated["inputs"]["seconds"] + generated["prepare"]["seconds"]
    result: dict = {
        "neurons": args.neurons,
        "layers": args.layers,
        "rows": args.rows,
        "backend": engine.name,
        "generated": generated,
        "setup_seconds": setup,
        "inference_seconds": output.seconds,
        "categories": int(output.live_rows.size),
    }
    print(f"generated {args.neurons} x {args.layers}, {args.rows} rows on {engine.name}: set-up {setup:.1f} s")
    device = engine.device
    del engine, output

    if args.file_layers:
        scratch = Path(tempfile.mkdtemp(dir=args.scratch))
        try:
            files: dict = {}
            part = sp.generate_network(args.neurons, args.file_layers, seed=0)
            _timed("write_tsv", files, lambda: sp.write_network(part, scratch / "network"))
            files["tsv_bytes"] = sum(p.stat().st_size for p in (scratch / "network").iterdir())
            loaded = _timed("load_tsv", files, lambda: sp.load_network(scratch / "network"))
            engine = _timed("prepare_loaded", files, lambda: sp.make_engine("auto", loaded))
            loaded_rows = engine.run(inputs).live_rows
            del engine
            # the same layers generated afresh (``part`` holds them built), in the same process
            fresh = sp.generate_network(args.neurons, args.file_layers, seed=0)
            generated_engine = _timed("prepare_generated", files, lambda: sp.make_engine("auto", fresh))
            generated_rows = generated_engine.run(inputs).live_rows
            del generated_engine
            files["same_categories_as_generated"] = bool(
                loaded_rows.size == generated_rows.size and (loaded_rows == generated_rows).all()
            )
            per_layer_files = (files["load_tsv"]["seconds"] + files["prepare_loaded"]["seconds"]) / args.file_layers
            per_layer_generated = generated["prepare"]["seconds"] / args.layers
            per_layer_same = files["prepare_generated"]["seconds"] / args.file_layers
            files.update(
                layers=args.file_layers,
                seconds_per_layer=per_layer_files,
                generated_seconds_per_layer=per_layer_generated,
                generated_same_layers_seconds_per_layer=per_layer_same,
            )
            result["files"] = files
            print(
                f"TSV: {files['tsv_bytes'] / 1e9:.1f} GB for {args.file_layers} layers; load + prepare "
                f"{per_layer_files * 1e3:.0f} ms a layer against {per_layer_same * 1e3:.0f} ms for the same "
                f"layers generated and {per_layer_generated * 1e3:.0f} ms for all {args.layers} generated"
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    path = write_result("gc_setup", device, result, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
