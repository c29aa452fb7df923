"""One round of :mod:`benchmarks.gc_against_tree` in a process of its own: the proxy on ``gpu``
and ``gpu-merged`` with the ``spartan_py`` of the tree given, printed as one ``RESULT`` line.

Run as a script (``python benchmarks/_tree_worker.py TREE DATA REPEATS``), never imported: the
tree goes first on ``sys.path`` before ``spartan_py`` is imported, so the package timed is that
tree's, whatever the checkout running the benchmark.
"""

import json
import sys
from typing import Any

BACKENDS = ("gpu", "gpu-merged")


def main(tree: str, data: str, repeats: int) -> dict:
    """Each backend's median and fastest run (ms) over ``repeats`` after warm-up, and whether its
    categories match the proxy's truth."""
    sys.path.insert(0, tree)
    import numpy as np

    import spartan_py as sp

    network = sp.load_network(f"{data}/neuron1024")
    inputs = sp.load_inputs(f"{data}/sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    truth = sp.read_truth(f"{data}/neuron1024-l120-categories-proxy60k.tsv")
    out: dict = {"tree": tree, "module": sp.__file__}
    for backend in BACKENDS:
        engine: Any = sp.make_engine(backend, network)  # a GPU engine: upload, time, final_rows
        batch = engine.upload(inputs)
        seconds = engine.time(batch, repeats=repeats, warmup=5)
        ids, _, _ = batch.final_rows(engine)
        out[backend] = {
            "median_ms": float(np.median(seconds)) * 1e3,
            "min_ms": float(np.min(seconds)) * 1e3,
            "truth": bool(np.array_equal(ids + 1, truth)),
        }
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
