"""Our engines' side of the peer harness (``benchmarks/peers.py``): each engine made, its
inputs uploaded and its inferences timed with CUDA events on the network the peers run."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np


def time_ours(name: str, network, inputs, repeats: int) -> tuple[dict, np.ndarray | None]:
    """One of our engines: set-up (engine made, inputs uploaded), the median of ``repeats``
    event-timed inferences after warm-up, the categories (1-based). The device memory it held
    is given back before the peers (other processes) run."""
    import cupy as cp

    try:
        entry, categories = _time_engine(name, network, inputs, repeats)
    except Exception as exc:  # an engine that cannot run this network says why
        entry, categories = {"error": f"{type(exc).__name__}: {exc}"}, None
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
    return entry, categories


def _time_engine(name: str, network, inputs, repeats: int) -> tuple[dict, np.ndarray]:
    import spartan_py as sp

    started = time.perf_counter()
    engine: Any = sp.make_engine(name, network)
    batch = engine.upload(inputs)
    setup = time.perf_counter() - started
    times = engine.time(batch, repeats=repeats, warmup=2)
    ids, values, _ = batch.final_rows(engine)
    entry = {
        "engine": engine.name,
        "inference_seconds": statistics.median(times),
        "min_seconds": min(times),
        "repeats": len(times),
        "setup_seconds": setup,
        "categories": int(ids.size),
        "poison_left": int(np.isnan(values).sum()),
    }
    return entry, ids.astype(np.int64) + 1
