"""cuBLAS's algorithm (output tile, split-K, cluster, waves) for every dense GEMM shape the
committed H100 traces and the training-step table hold, as this GPU's cuBLASLt heuristic picks it
(``spartan_py.sparsity.cublas_algo``): a description of the launches, no time.

    python -m benchmarks.cublas_algos        # on a GPU; writes benchmarks/results/cublas_algos-*.json.gz

The committed traces were measured before runs recorded the algorithm; this file lets an analysis
(or a later fit) read it beside them. Ask it on a GPU of the traces' architecture and SM count.
"""

from __future__ import annotations

import argparse
import gzip

import pandas as pd

from benchmarks.harness import RESULTS, write_result
from spartan_py.costmodel.algorithm_table import forward_shapes
from spartan_py.engines.shared.cuda import device_name
from spartan_py.sparsity.cublas_algo import heuristic_algo

PRECISIONS = ("fp32", "tf32")


def gemm_shapes() -> list[tuple[int, int, int, str, bool]]:
    """``(m, n, k, precision, transposed_a)`` of every cuBLAS record in the committed fidelity
    traces and of every GEMM of the training-step table (its weight gradients read A transposed)."""
    shapes = set()
    for path in sorted((RESULTS / "fidelity").glob("*.trace.csv.gz")):
        shapes |= set(forward_shapes(pd.read_csv(path, comment="#")).dropna())
    table = pd.read_csv(RESULTS / "spartan-table-h100" / "gemms.csv.gz")
    for row in table.itertuples():
        for precision in PRECISIONS:
            shapes.add((int(row.M), int(row.N), int(row.K), precision, row.gemm == "weight_grad"))
    return sorted(shapes)


def main(argv: list[str] | None = None) -> int:
    """Ask cuBLASLt for every shape and write ``cublas_algos-<date>.json.gz``."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = []
    for m, n, k, precision, transposed in gemm_shapes():
        algo = heuristic_algo(m, n, k, precision, transposed)
        shape = {"m": m, "n": n, "k": k, "precision": precision, "transposed_a": transposed}
        rows.append(shape | {"variant": algo.variant if algo else None})
    if all(row["variant"] is None for row in rows):
        raise SystemExit("cuBLASLt could not be asked here (no GPU or no library)")
    import cupy

    path = write_result("cublas_algos", device_name(cupy), {"shapes": rows}, RESULTS)
    packed = path.with_suffix(".json.gz")
    packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    path.unlink()
    print(packed.relative_to(RESULTS.parent.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
