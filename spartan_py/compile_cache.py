"""Compile the Numba kernels ahead of their first use, filling Numba's on-disk cache.

A fresh checkout compiles each kernel the first time it runs, one after another: some 25 s of
CPU time for the quickstart's kernels on the 2-core machine. The set-up script runs
``python -m spartan_py.compile_cache GROUP`` for each group in a process of its own, so that
the groups compile at once, one per core; each group runs its kernels on a few rows, with the
argument types real runs give them. ``cpu`` and ``generated`` are what the quickstart runs
(about 13 s each, 15 s of wall time side by side); ``rest`` is every other kernel (the test
suite's). A kernel both groups need is compiled first by one of them, so that the other finds
it in the cache.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import live_rows_matrix
from spartan_py.engines.cpu.engine import CpuEngine
from spartan_py.engines.merged.twin import MergedTwinEngine
from spartan_py.engines.rows.twin import RowsTwinEngine
from spartan_py.engines.shared.layer_plan import plan_layer
from spartan_py.graph_challenge.formats import read_triples_matrix
from spartan_py.graph_challenge.generate import generate_inputs, generate_network
from spartan_py.graph_challenge.network import Network
from spartan_py.graph_challenge.writers import write_triples, write_truth
from spartan_py.sparsity.monitor import SparsityMonitor

GROUPS: dict[str, Callable[[], None]] = {}
"""Group name -> the function that compiles it."""


def _group(function: Callable[[], None]) -> Callable[[], None]:
    GROUPS[function.__name__.removeprefix("_")] = function
    return function


@_group
def _cpu() -> None:
    """The cpu engine's kernels on merged columns (its path on RadiX-Net networks), and column
    merging on a generated network (worked out per lane)."""

    CpuEngine(generate_network(1024, layers=8, seed=0), merged=True)  # its constructor runs each kernel once


@_group
def _generated() -> None:
    """The bank-conflict-free layer plans, the generator of input rows and the rows kernel's
    CPU twin (``gpu-twin``), with the final rows every engine returns."""

    # the plans' colouring first: the cpu group needs it too, after some 7 s of column
    # merging, and by then reads it from the cache instead of compiling it again
    plan_layer(generate_network(1024, layers=1, seed=0).weights[0])
    inputs = generate_inputs(64, 1024, seed=0)
    live_rows_matrix(np.array([1]), np.ones((1, 32), np.float32), 3)
    RowsTwinEngine(generate_network(1024, layers=3, seed=0)).run(inputs)


@_group
def _rest() -> None:
    """Every other kernel: the merged kernel's twin, the cpu engine's row path, column merging
    on a network read from files, the Spartan epilogues and the TSV scanner and writer (the
    test suite's; the quickstart needs none)."""

    network = generate_network(1024, layers=3, seed=0)
    inputs = generate_inputs(64, 1024, seed=0)
    MergedTwinEngine(network).run(inputs)
    CpuEngine(network, merged=False)
    rng = np.random.default_rng(0)
    weights = [sp.random(1024, 1024, density=0.03, format="csr", dtype=np.float32, random_state=rng) for _ in range(3)]
    CpuEngine(Network(1024, tuple(weights), bias=-0.3), merged=True)  # merging from CSR matrices
    z = np.random.default_rng(0).standard_normal((128, 64), dtype=np.float32)
    SparsityMonitor(tile=(32, 32)).epilogue(z)
    SparsityMonitor(tile=(32, 32), mode="off").epilogue(z)
    with tempfile.TemporaryDirectory() as folder:
        for name in ("inputs.tsv", "inputs.tsv.gz"):
            path = write_triples(f"{folder}/{name}", inputs)
            read_triples_matrix(path, (64, 1024))
            read_triples_matrix(path, (None, None))
        write_truth(f"{folder}/truth.tsv", np.arange(1, 5))


def main(argv: list[str]) -> int:
    """Compile the named groups (all of them with no name)."""
    for name in argv or list(GROUPS):
        if name not in GROUPS:
            raise SystemExit(f"unknown group {name!r}; groups: {', '.join(GROUPS)}")
        GROUPS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
