"""The peers' inputs (``benchmarks/peers.py``): the challenge's layer TSVs and input rows written
by our code, whether they fit the disk (written whole or streamed), and XY's and SNICIT's
scheduling of them into their cache, a chunk of layers per process.

The patched peers cache their scheduled weights as raw binary (``n{N}-weight-l{i}.bin`` of
float32, ``n{N}-row-l{i}.bin`` of int32; ``harness_io.hpp`` in ``peer_patches/harness.patch``)
where the original writes text, one value a line, and reads it back at about 66 MB/s on one
thread: some 9 minutes at 65536 x 1920 each time XY or SNICIT starts. The unpatched build of
``--check`` reads text, which :func:`scheduled_as_text` writes from the binary cache."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import _peers_build as pb

#: Bytes of one TSV line (``row<TAB>col<TAB>0.0625<LF>``) for a width's row and column digits.
VALUE_CHARS = 6

#: Scheduled float32 weights per edge (measured at 65536 neurons: 2,516,582 values a layer for
#: 2,097,152 edges; 1.2 at 1024 too) and int32 row entries per neuron (2 at 65536 and 1024).
SCHEDULED_VALUES_PER_EDGE = 1.25
SCHEDULED_ROWS_PER_NEURON = 2


def tsv_bytes(neurons: int, layers: int) -> int:
    """About how many bytes the challenge's layer TSVs of a network take (32 entries a row)."""
    digits = len(str(neurons))
    return layers * neurons * 32 * (2 * digits + VALUE_CHARS + 3)


def schedule_bytes(neurons: int, layers: int) -> int:
    """About how many bytes XY's and SNICIT's scheduled weights take (the patched binary cache)."""
    return int(layers * neurons * 4 * (32 * SCHEDULED_VALUES_PER_EDGE + SCHEDULED_ROWS_PER_NEURON))


def scheduled_file(cache: Path, neurons: int, what: str, layer: int) -> Path:
    """One layer's file of the patched peers' cache (``what``: ``weight`` or ``row``)."""
    return cache / f"neuron{neurons}" / f"n{neurons}-{what}-l{layer}.bin"


def scheduled(cache: Path, neurons: int, layer: int) -> bool:
    """Whether ``layer`` is in the cache: its row file is written last, and only once whole."""
    return scheduled_file(cache, neurons, "row", layer).exists()


def scheduled_as_text(cache: Path, neurons: int, layers: int, dest: Path) -> Path:
    """The first ``layers`` of the binary cache written as the unpatched peers' text cache in
    ``dest`` (``neuron{N}/n{N}-weight-l{i}.tsv``, ``-row-``): the lines their own writer makes,
    ``%g`` of each weight (the binary holds the values that text round trip gives) and the row
    entries as integers. Returns ``dest``."""
    import numpy as np

    folder = dest / f"neuron{neurons}"
    folder.mkdir(parents=True, exist_ok=True)
    for layer in range(layers):
        for what, dtype, fmt in (("weight", np.float32, "%g"), ("row", np.int32, "%d")):
            values = np.fromfile(scheduled_file(cache, neurons, what, layer), dtype=dtype)
            np.savetxt(folder / f"n{neurons}-{what}-l{layer}.tsv", values, fmt=fmt)
    return dest


def write_peer_inputs(folder: Path, network, inputs, first: int = 1, last: int | None = None) -> dict:
    """Write layers ``first..last`` (1-based; default all) as ``n{N}-l{i}.tsv`` (missing ones
    only) and the input rows as ``sparse-images-{N}.tsv`` with our writers. Returns paths."""
    from spartan_py.graph_challenge import write_triples

    weights = folder / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    wanted = range(first, (network.layers if last is None else last) + 1)
    paths = {i: weights / f"n{network.neurons}-l{i}.tsv" for i in wanted}
    missing = [i for i, path in paths.items() if not path.exists()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # the formatter releases the GIL
        list(pool.map(lambda i: write_triples(paths[i], network.weights[i - 1]), missing))
    source = folder / f"sparse-images-{network.neurons}.tsv"
    if not source.exists():
        write_triples(source, inputs)
    return {"weights": weights, "input": source}


def plan_disk(neurons: int, layers: int, modes: list[str], free: int, chunk: int) -> tuple[list, list, dict]:
    """Which peers run, and whether their layer TSVs are written all at once or streamed
    (XY and SNICIT schedule ``chunk`` layers' TSVs at a time, deleted once scheduled; BF
    and SNIG read every TSV at start). Returns (runnable, streamed, why not by mode)."""
    tsv = tsv_bytes(neurons, layers)
    sched = schedule_bytes(neurons, layers) if set(modes) & set(pb.SCHEDULING) else 0
    if tsv + sched <= free:
        return modes, [], {}
    why = {m: f"its layer TSVs ({tsv / 1e9:.0f} GB) do not fit the {free / 1e9:.0f} GB free" for m in modes}
    streamable = sched + tsv_bytes(neurons, chunk) * 2 <= free
    streamed = [m for m in modes if m in pb.SCHEDULING and streamable]
    return streamed, streamed, {m: w for m, w in why.items() if m not in streamed}


def schedule(binary: Path, mode: str, case: dict, args) -> dict:
    """Schedule XY's / SNICIT's weights into the cache (their set-up; both read the same
    files): ``--schedule-workers`` processes at a time, ``--schedule-chunk`` layers each,
    only the layers not scheduled yet (a call cut short goes on where it stopped). Streamed:
    each wave's layer TSVs are written before it and deleted after it."""
    neurons, layers, folder = case["neurons"], case["layers"], case["folder"]
    cache = folder / "scheduled"
    cache.mkdir(parents=True, exist_ok=True)

    missing = [layer for layer in range(layers) if not scheduled(cache, neurons, layer)]
    if not missing:
        return {"seconds": 0.0, "cached": True}
    started = time.perf_counter()
    step = args.schedule_chunk
    ranges = [(a, min(a + step, layers)) for a in range(missing[0], layers, step)]
    tiny = folder / "schedule-input.tsv"  # scheduling reads an input file but not its rows
    tiny.write_text("1\t1\t1\n")
    common = ["--input", str(tiny), "--cache", str(cache), "--schedule-only", "-b", "1000"]
    for at in range(0, len(ranges), args.schedule_workers):
        wave = [
            r
            for r in ranges[at : at + args.schedule_workers]
            if not all(scheduled(cache, neurons, x) for x in range(*r))
        ]
        if not wave:
            continue
        if case["streamed"]:
            write_peer_inputs(folder, case["network"], case["inputs"], wave[0][0] + 1, wave[-1][1])
        left = args.timeout_s - (time.perf_counter() - started)
        commands = [
            [str(binary), "-m", mode, "-n", str(neurons), "-l", str(b), "--schedule-from", str(a)]
            + ["--weights", str(case["files"]["weights"]), *common]
            for a, b in wave
        ]
        pb.run_all(commands, binary.parent, left)
        if case["streamed"]:
            for index in range(wave[0][0] + 1, wave[-1][1] + 1):
                (case["files"]["weights"] / f"n{neurons}-l{index}.tsv").unlink(missing_ok=True)
        if time.perf_counter() - started > args.timeout_s:
            break
    left = sum(not scheduled(cache, neurons, layer) for layer in range(layers))
    result = {"seconds": time.perf_counter() - started, "cached": False, "ok": left == 0}
    return result if left == 0 else {**result, "layers_left": left, "note": "run again to go on"}
