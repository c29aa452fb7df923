"""Run the GPU engine once per kernel variant on the proxy input, for a profiler to watch.

ncu --kernel-name regex:gc_ --launch-skip S --launch-count C python benchmarks/profile_gpu.py [--data DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import spartan_py as sp
from benchmarks.harness import DEFAULT_DATA
from spartan_py.engines.rows.engine import RowsEngine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rows-per-tile", type=int, default=16)
    parser.add_argument("--layers", type=int, default=120)
    args = parser.parse_args()
    network = sp.load_network(args.data / "neuron1024", layers=args.layers)
    inputs = sp.load_inputs(args.data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    engine = RowsEngine(network, rows_per_tile=args.rows_per_tile, use_graph=False, compact_every=1)
    batch = engine.upload(inputs)
    seconds = engine.run_device(batch, per_layer_times=True)
    print(f"R{args.rows_per_tile}: {seconds * 1e3:.3f} ms; categories {int(batch.counts[-1].get())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
