"""How many of a Graph Challenge network's live rows are exact duplicates, layer by layer.

Identical rows entering a layer leave it identical (each row's sums depend on that row and the
weights alone), so an engine could compute each distinct row once and hand its result to its
copies: exact, whatever the weights. This counts what that would save. For each network it runs
the SciPy reference layer (:func:`~spartan_py.engines.reference.reference_layer`, float32 here,
as the GPU engines compute) and, after each sampled layer, the live rows and how many of them
are distinct: rows are grouped by a hash of their entries and each row is compared entry for
entry with the first row of its group, so the count is exact (a row that differs from its
group's first row counts as distinct of its own, an upper bound only where hashes collide).
CPU only.

    python -m benchmarks.gc_duplicate_rows [--cases proxy,generated:4096x64:60000,...] [--out DIR]

A case is ``proxy`` (the official 1024 x 120 network on the 60000-row proxy input, from
``--data``) or ``generated:NEURONSxLAYERS:ROWS`` (a generated network and ``ROWS`` generated rows).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.harness import DEFAULT_DATA, RESULTS, log, write_result
from spartan_py.engines.shared.duplicate_rows import representatives

DEFAULT_CASES = "proxy,generated:1024x120:60000,generated:4096x64:60000,generated:65536x40:6000"


def distinct_rows(matrix: sp.csr_matrix) -> tuple[int, int]:
    """``(live rows, distinct live rows)`` of a CSR matrix, exact (module docstring)."""
    matrix = sp.csr_matrix(matrix)
    lengths = np.diff(matrix.indptr)
    live = np.flatnonzero(lengths)
    if live.size == 0:
        return 0, 0
    rows = matrix[live]
    rows.sort_indices()
    entry_rows = np.repeat(np.arange(live.size), np.diff(rows.indptr))
    mixed = (rows.indices.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (
        rows.data.astype(np.float32).view(np.uint32).astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
    )
    mixed ^= mixed >> np.uint64(29)
    position = np.arange(mixed.size, dtype=np.uint64) - rows.indptr[entry_rows].astype(np.uint64)
    mixed *= position * np.uint64(2) + np.uint64(1)  # where in the row an entry sits counts too
    hashes = np.zeros(live.size, dtype=np.uint64)
    np.add.at(hashes, entry_rows, mixed)
    hashes ^= np.diff(rows.indptr).astype(np.uint64) * np.uint64(0x165667B19E3779F9)
    row_lengths = lengths[live]

    def equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        difference = sp.csr_matrix(rows[a] - rows[b])  # sp subtraction drops exact zeros
        return (np.diff(difference.indptr) == 0) & (row_lengths[a] == row_lengths[b])

    kept_by = representatives(hashes, equal)
    return int(live.size), int(np.count_nonzero(kept_by == np.arange(live.size)))


def _case(text: str, data: Path):
    from spartan_py.api import resolve_inputs, resolve_network
    from spartan_py.graph_challenge.network import load_inputs

    if text == "proxy":
        network = resolve_network(data / "neuron1024", layers=120)
        inputs = load_inputs(data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
        return "official 1024 x 120, 60000-row proxy", network, inputs
    family, shape, rows = text.split(":")
    neurons, layers = (int(x) for x in shape.split("x"))
    network = resolve_network(f"{family}:{neurons}", layers=layers)
    return (
        f"{family}:{neurons} x {layers}, {rows} generated rows",
        network,
        resolve_inputs(f"generated:{rows}", neurons),
    )


def sampled(layer: int, layers: int) -> bool:
    """Layers reported: every one of the first 32, then every 8th, and the last."""
    return layer <= 32 or layer % 8 == 0 or layer == layers


def count_case(text: str, data: Path) -> dict:
    """Live and distinct rows after each sampled layer of one case."""
    from spartan_py.engines.reference import reference_layer

    label, network, inputs = _case(text, data)
    started = time.perf_counter()
    rows = sp.csr_matrix(inputs, dtype=np.float32)
    by_layer = []
    for layer, weights in enumerate(network.weights, start=1):
        rows = reference_layer(rows, sp.csr_matrix(weights, dtype=np.float32), network.bias, network.clamp)
        if sampled(layer, network.layers):
            live, distinct = distinct_rows(rows)
            by_layer.append({"layer": layer, "live_rows": live, "distinct_rows": distinct})
            log(f"{label}: layer {layer}: {live} live, {distinct} distinct")
    return {
        "case": text,
        "network": label,
        "rows": int(inputs.shape[0]),
        "by_layer": by_layer,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Count every case and write the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the official 1024 files (proxy)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cases = [count_case(text, args.data) for text in args.cases.split(",")]
    from spartan_py.runner.store import cpu_name

    path = write_result("gc_duplicate_rows", f"cpu: {cpu_name()}", {"cases": cases}, args.out)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
