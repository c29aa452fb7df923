"""The GPU side of ``benchmarks/gc_merged_variants.py``: the proxy's data, the CPU engine's
reference, and each variant's :class:`~spartan_py.engines.merged.engine.MergedEngine`, its
batch and its outputs (CuPy, so imported only on a GPU run)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import spartan_py as sp
from benchmarks.gc_gpu import launch_times
from spartan_py.engines.merged.engine import MergedEngine
from spartan_py.engines.shared.column_merge import merge_network
from spartan_py.engines.shared.cuda import device_name, import_cupy


class GpuSide:
    """The proxy (network merged once for every engine, inputs, truth) and, when ``cpu``, the
    CPU engine's output for the value checks."""

    def __init__(self, data: Path, *, cpu: bool):
        self.network = sp.load_network(data / "neuron1024")
        self.inputs = sp.load_inputs(data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
        self.truth = sp.read_truth(data / "neuron1024-l120-categories-proxy60k.tsv")
        self.merged = merge_network(self.network)
        self.cpu = sp.make_engine("cpu", self.network).run(self.inputs) if cpu else None
        self.device = device_name(import_cupy())

    def build(self, options: Mapping[str, Any], monitor: str) -> tuple[MergedEngine, object]:
        """The engine of a variant's ``options`` with ``monitor``, and its uploaded batch."""
        engine = MergedEngine(self.network, monitor=monitor, merged=self.merged, **options)
        return engine, engine.upload(self.inputs)

    @staticmethod
    def read(engine: MergedEngine, batch) -> dict:
        """The last run's final rows (ids sorted, n-wide values), live rows and weighted
        non-zeros per layer, and (monitor fused) the final rows' monitor counts in id order."""
        counts = batch.counts.get()
        ids, values, _ = batch.final_rows(engine)
        tiles = None
        if engine.monitor == "fused":
            alive, width = int(counts[-1]), engine.network.neurons // 32
            final = batch.buffers[len(engine.chunks) % 2]
            order = np.argsort(final.ids[:alive].get(), kind="stable")
            tiles = batch.tile_nnz[: alive * width].get().reshape(alive, width)[order]
        return {"ids": ids, "values": values, "counts": counts, "nnz": batch.nnz_counts.get(), "tiles": tiles}

    @staticmethod
    def launch_times(engine: MergedEngine, batch) -> list[float]:
        """Each launch's seconds on eager runs (:func:`benchmarks.gc_gpu.launch_times`)."""
        return launch_times(engine, batch)

    def probe(self, options: Mapping[str, Any]) -> dict:
        """Run a variant's ``options`` (monitor fused) and check its categories: a child
        process's verdict."""
        engine, batch = self.build(options, "fused")
        for _ in range(2):
            engine.run_device(batch)
        got = self.read(engine, batch)
        ok = bool(np.array_equal(got["ids"] + 1, self.truth)) and not np.isnan(got["values"]).any()
        return {"ok": ok, "categories": int(got["ids"].size)}
