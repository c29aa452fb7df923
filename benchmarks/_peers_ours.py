"""Our engines' side of the peer harness (``benchmarks/peers.py``): each engine made, its
inputs uploaded and its inferences timed with CUDA events on the network the peers run; and
the whole ``spartan infer`` command a user would run for it, timed as a process."""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
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


def infer_command(neurons: int, layers: int, data: Path | None, official: bool, rows: int) -> list[str]:
    """The ``spartan infer`` command a user runs for the network the harness times (``auto``
    backend, ``rows`` input rows: the official proxy's from ``data``, else generated with seed 0,
    as :func:`benchmarks.peers.load_case` makes them)."""
    if official:
        assert data is not None
        network, inputs = str(data / "neuron1024"), str(data / "sparse-images-1024-proxy60k.tsv.gz")
    else:
        network, inputs = f"generated:{neurons}:0", f"generated:{rows}:0"
    command = [sys.executable, "-m", "spartan_py", "infer", "--network", network, "--inputs", inputs]
    return command + ["--layers", str(layers), "--rows", str(rows), "--backend", "auto", "--json", "--quiet"]


def time_command(command: list[str], timeout_s: float) -> dict:
    """The whole command's wall time (a fresh process: imports, loading, set-up, inference) and
    what it reported (``seconds`` is its inference, ``categories`` its count); an ``error`` where it
    failed or ran past ``timeout_s``."""
    shown = shlex.join(["python", *command[1:]])
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"command": shown, "error": f"ran past {timeout_s:g} s"}
    entry: dict[str, Any] = {"command": shown, "wall_seconds": time.perf_counter() - started}
    if done.returncode != 0:
        return entry | {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    try:
        reported = json.loads(done.stdout)
    except json.JSONDecodeError:
        return entry | {"error": f"no JSON object on its output: {done.stdout.strip()[-300:]}"}
    keys = ("backend", "seconds", "load_seconds", "prepare_seconds", "categories")
    return entry | {key: reported.get(key) for key in keys}
