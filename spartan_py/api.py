"""The Python API for Graph Challenge inference: resolve a network and inputs, run, check."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.costmodel.simulate import guessed_families, resolve_machine, simulate_trace
from spartan_py.engines import Engine, make_engine, twin_backend
from spartan_py.errors import InputError
from spartan_py.graph_challenge.check_inputs import check_inputs_file, check_network_files, check_truth_file
from spartan_py.graph_challenge.formats import read_truth
from spartan_py.graph_challenge.generate import (
    GENERATED_FAMILIES,
    generate_inputs,
    generate_network,
    generated_family,
)
from spartan_py.graph_challenge.network import (
    Network,
    check_row_count,
    layer_paths,
    load_inputs,
    load_network,
    network_width,
)
from spartan_py.trace import TraceRecord


@dataclass
class InferenceResult:
    """Everything a Graph Challenge run produced.

    ``categories`` are the 1-based indices of the input rows still non-zero after the last
    layer. ``seconds`` is inference alone (no file reading, no weight preparation);
    ``edges_per_second`` = rows x total edges / seconds, the challenge's rate.
    """

    backend: str
    device: str
    neurons: int
    layers: int
    rows: int
    edges: int
    categories: np.ndarray
    live_rows_by_layer: list[int]
    nonzeros_by_layer: list[int]
    seconds: float
    load_seconds: float
    prepare_seconds: float
    values: sp.csr_matrix
    passed: bool | None = None
    simulated: bool = False
    trace: list[TraceRecord] = field(default_factory=list)
    machine: str | None = None
    predicted_trace: pd.DataFrame | None = None

    @property
    def edges_per_second(self) -> float:
        """Challenge rate: inputs x edges / inference seconds."""
        return edge_rate(self.rows, self.edges, self.seconds)

    def summary(self) -> dict:
        """The run as a JSON-ready dict (no arrays but the per-layer counts)."""
        return {
            "device": self.device,
            **run_summary(self),
            "load_seconds": self.load_seconds,
            "prepare_seconds": self.prepare_seconds,
            "simulated": self.simulated,
            "machine": self.machine,
            "guessed": self.guessed_calibrations(),
        }

    def guessed_calibrations(self) -> dict[str, list[str]]:
        """{calibration kind: families} of the simulated launches priced by a guess (a
        family-wide fallback or the defaults; empty for a measured run)."""
        if self.predicted_trace is None:
            return {}

        return guessed_families(self.predicted_trace)


def edge_rate(rows: int, edges: int, seconds: float) -> float:
    """The challenge's rate: input rows x network edges / seconds (inf for no time)."""
    return rows * edges / seconds if seconds > 0 else float("inf")


def run_summary(result) -> dict:
    """The fields every Graph Challenge result reports, one run or merged shards: backend,
    sizes, categories (count), truth check, seconds, rate and the per-layer counts."""
    return {
        "backend": result.backend,
        "neurons": result.neurons,
        "layers": result.layers,
        "rows": result.rows,
        "edges": result.edges,
        "categories": int(result.categories.size),
        "passed": result.passed,
        "seconds": result.seconds,
        "edges_per_second": result.edges_per_second,
        "live_rows_by_layer": [int(v) for v in result.live_rows_by_layer],
        "nonzeros_by_layer": [int(v) for v in result.nonzeros_by_layer],
    }


def _generated_spec(spec: str, what: str) -> tuple[int, int]:
    """Parse ``PREFIX:A[:SEED]`` into (A, SEED)."""
    prefix, *parts = spec.split(":")
    if len(parts) not in (1, 2):
        raise InputError(f"bad {what} {spec!r}: expected '{prefix}:N' or '{prefix}:N:SEED'")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise InputError(f"bad {what} {spec!r}: N and SEED must be integers") from None
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


def network_neurons(spec: str | Path | Network) -> int:
    """The width of the network ``spec`` names, read from the spec or the layer files'
    names: nothing is generated or loaded."""
    if isinstance(spec, Network):
        return spec.neurons
    text = str(spec)
    if generated_family(text):
        return _generated_spec(text, "network")[0]
    return network_width(Path(text))


def check_request(
    network: str | Path,
    inputs: str | Path,
    *,
    layers: int | None = None,
    rows: int | None = None,
    truth: str | Path | None = None,
    read_files: bool = True,
) -> tuple[int, int]:
    """Refuse what cannot run before anything is computed: the specs, ``layers`` and ``rows``
    (at least 1, within the inputs), the layer files contiguous, and with ``read_files`` every
    file read whole and checked (:mod:`~spartan_py.graph_challenge.check_inputs`).
    Returns ``(neurons, layers)``; raises :class:`InputError` naming the file and field."""

    if layers is not None and layers < 1:
        raise InputError(f"layers {layers}: expected at least 1 layer (--layers, or layers: in an experiment)")
    text = str(network)
    if generated_family(text):
        neurons, depth = _generated_spec(text, "network")[0], 120 if layers is None else layers
    elif read_files:
        neurons, depth = check_network_files(text, layers=layers)
    else:
        neurons, paths = layer_paths(text, layers=layers)
        depth = len(paths)
    source = str(inputs)
    if source.startswith("generated:"):
        if rows is not None:
            check_row_count(rows, _generated_spec(source, "inputs")[0], source)
    elif read_files:
        check_inputs_file(source, neurons, rows)
    elif rows is not None:
        check_row_count(rows, None, source)
    if truth is not None and read_files:
        check_truth_file(truth)
    return neurons, depth


def resolve_network(spec: str | Path | Network, layers: int | None = None) -> Network:
    """A network from a directory path, ``generated:N[:SEED]``,
    ``generated-unmergeable:N[:SEED]`` or an existing :class:`Network`.

    ``layers`` truncates a loaded network (or sets a generated one's depth; default 120).
    """
    if isinstance(spec, Network):
        return spec if layers is None else spec.truncated(layers)
    text = str(spec)
    family = generated_family(text)
    if family:
        neurons, seed = _generated_spec(text, "network")
        return generate_network(
            neurons, 120 if layers is None else layers, seed, unmergeable=GENERATED_FAMILIES[family]
        )
    return load_network(text, layers=layers)


def resolve_inputs(spec: str | Path | sp.spmatrix, neurons: int, rows: int | None = None) -> sp.csr_matrix:
    """Input rows from a TSV/MTX path, ``generated:ROWS[:SEED]`` or a sparse matrix; ``rows``:
    only the first that many (of a file or of the generated rows)."""
    if sp.issparse(spec):
        matrix = sp.csr_matrix(spec, dtype=np.float32)
        if matrix.shape[1] != neurons:
            raise InputError(f"inputs have {matrix.shape[1]} columns; the network has {neurons} neurons")
        return matrix
    text = str(spec)
    if text.startswith("generated:"):
        count, seed = _generated_spec(text, "inputs")
        if rows is not None:
            check_row_count(rows, count, text)
        matrix = generate_inputs(count, neurons, seed)
        return matrix[:rows] if rows is not None else matrix
    return load_inputs(text, neurons, rows=rows)


@functools.lru_cache(maxsize=4)
def cached_network(spec: str, layers: int | None = None) -> Network:
    """:func:`resolve_network` of a spec string, kept for the next call in this process
    (a sweep's points and a worker's shards reuse it)."""
    return resolve_network(spec, layers)


@functools.lru_cache(maxsize=4)
def cached_inputs(spec: str, neurons: int, rows: int | None = None) -> sp.csr_matrix:
    """:func:`resolve_inputs` of a spec string, kept for the next call in this process."""
    return resolve_inputs(spec, neurons, rows=rows)


def infer(
    network: Network,
    inputs: sp.spmatrix,
    *,
    backend: str = "auto",
    truth: np.ndarray | str | Path | None = None,
    run_id: str = "",
    load_seconds: float = 0.0,
    mode: str = "measured",
    machine: str | None = None,
    engine: Engine | None = None,
    **engine_options,
) -> InferenceResult:
    """Run ``network`` over ``inputs`` on ``backend`` and check against ``truth`` if given.

    ``truth`` is an array of 1-based categories or a truth file path. ``backend`` is a name
    from :data:`spartan_py.engines.BACKEND_CHOICES`; ``auto`` takes the GPU when present.
    ``mode="simulated"`` runs the GPU kernel as its CPU twin (``gpu-twin``, or
    ``gpu-merged-twin`` for ``backend="gpu-merged"``; ``auto``: ``gpu-twin``, whose launches
    every machine file describes) and takes
    ``seconds`` from the cost model for ``machine`` (a ``sim/`` name, default
    :data:`~spartan_py.costmodel.machine.DEFAULT_MACHINE`,
    optionally ``NAME+VARIANT``); the result is marked simulated and carries the predicted
    trace. ``engine`` reuses an engine made by :func:`~spartan_py.engines.make_engine` for
    ``network`` (its preparation is then not repeated; ``backend`` and the options are ignored).
    """
    if mode not in ("measured", "simulated"):
        raise InputError(f"mode must be 'measured' or 'simulated', not {mode!r}")
    if mode == "simulated":
        twin = twin_backend(backend)

        machine = machine or DEFAULT_MACHINE
        sim_machine, sim_variant = resolve_machine(machine)
        backend = twin
    elif machine is not None:
        raise InputError("a machine is only used in simulated mode (mode='simulated')")
    inputs = resolve_inputs(inputs, network.neurons)
    if truth is not None and not isinstance(truth, np.ndarray):
        truth = read_truth(truth)
    started = time.perf_counter()
    if engine is None:
        engine = make_engine(backend, network, **engine_options)
    elif engine.network is not network:
        raise InputError("engine= was prepared for another network than the one given")
    prepare_seconds = time.perf_counter() - started
    output = engine.run(inputs, run_id=run_id)
    predicted_trace = None
    if mode == "simulated":
        output.seconds, predicted_trace = simulate_trace(output.trace, sim_machine, sim_variant)
        output.device = predicted_trace["device"].iloc[0] if len(predicted_trace) else f"simulated:{machine}"
    categories = output.live_rows.astype(np.int64) + 1
    passed = None if truth is None else bool(np.array_equal(categories, np.asarray(truth, dtype=np.int64)))
    return InferenceResult(
        backend=engine.name,
        device=output.device,
        neurons=network.neurons,
        layers=network.layers,
        rows=inputs.shape[0],
        edges=network.edges,
        categories=categories,
        live_rows_by_layer=output.live_rows_by_layer,
        nonzeros_by_layer=output.nonzeros_by_layer,
        seconds=output.seconds,
        load_seconds=load_seconds,
        prepare_seconds=prepare_seconds,
        values=output.values,
        passed=passed,
        simulated=output.simulated,
        trace=output.trace,
        machine=machine,
        predicted_trace=predicted_trace,
    )
