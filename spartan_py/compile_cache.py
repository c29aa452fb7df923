"""Compile the Numba kernels ahead of their first use, filling Numba's on-disk cache.

A fresh checkout compiles each kernel the first time it runs, one after another: some 27 s of
the quickstart's first run on a 2-core machine. The set-up script runs
``python -m spartan_py.compile_cache GROUP`` for each group in a process of its own, so that
the groups compile at once, one per core; each group runs its kernels on a few rows, with the
argument types real runs give them. The groups are what the quickstart runs; the other
kernels compile on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

GROUPS: dict[str, Callable[[], None]] = {}
"""Group name -> the function that compiles it."""


def _group(function: Callable[[], None]) -> Callable[[], None]:
    GROUPS[function.__name__.removeprefix("_")] = function
    return function


@_group
def _cpu() -> None:
    """The cpu engine's kernels (merged columns, its path on RadiX-Net networks)."""
    import numpy as np
    import scipy.sparse as sp

    from spartan_py.engines.cpu.engine import CpuEngine
    from spartan_py.graph_challenge.network import Network

    # a random network (the generator compiles in the other group); its constructor runs each kernel once
    rng = np.random.default_rng(0)
    weights = [sp.random(1024, 1024, density=0.03, format="csr", dtype=np.float32, random_state=rng) for _ in range(3)]
    CpuEngine(Network(1024, tuple(weights), bias=-0.3), merged=True)


@_group
def _generated() -> None:
    """The generator of input rows and the rows kernel's CPU twin (``gpu-twin``)."""
    from spartan_py.engines.rows.twin import RowsTwinEngine
    from spartan_py.graph_challenge.generate import generate_inputs, generate_network

    RowsTwinEngine(generate_network(1024, layers=3, seed=0)).run(generate_inputs(64, 1024, seed=0))


def main(argv: list[str]) -> int:
    """Compile the named groups (all of them with no name)."""
    for name in argv or list(GROUPS):
        if name not in GROUPS:
            raise SystemExit(f"unknown group {name!r}; groups: {', '.join(GROUPS)}")
        GROUPS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
