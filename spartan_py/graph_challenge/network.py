"""Graph Challenge networks and input rows: the data model and loading from files.

A network is a directory of ``n{N}-l{i}.tsv``, ``n{N}-l{i}.tsv.gz`` or ``n{N}-l{i}.mtx``
files, ``i`` = 1..L. Weights are held as float32 CSR matrices with rows = input neurons and
columns = output neurons, so that a layer computes ``Y @ W``.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spartan_py.errors import InputError
from spartan_py.graph_challenge.formats import IndexRangeError, read_matrix_market, read_triples_matrix
from spartan_py.graph_challenge.writers import write_triples

#: Official bias by neuron count (the same value for every neuron of every layer).
OFFICIAL_BIAS: dict[int, float] = {1024: -0.30, 4096: -0.35, 16384: -0.40, 65536: -0.45}
#: Official activation ceiling: ``Y = min(CLAMP, ReLU(...))``.
OFFICIAL_CLAMP = 32.0

_LAYER_NAME = re.compile(r"^n(\d+)-l(\d+)\.(tsv|tsv\.gz|mtx)$")
_SUFFIX_PREFERENCE = ("tsv.gz", "tsv", "mtx")


def official_bias(neurons: int) -> float:
    """The official bias for a network of ``neurons`` neurons per layer."""
    try:
        return OFFICIAL_BIAS[neurons]
    except KeyError:
        sizes = ", ".join(str(n) for n in OFFICIAL_BIAS)
        raise InputError(f"no official bias for {neurons} neurons; official sizes are {sizes}") from None


@dataclass(frozen=True)
class Network:
    """A sparse DNN: ``layers`` square float32 CSR weight matrices, one bias, one clamp.

    ``weights[i][a, b]`` is the weight from input neuron ``a`` to output neuron ``b`` of
    layer ``i + 1``. ``bias`` is added to the non-zero entries of ``Y @ W`` only.
    """

    neurons: int
    weights: tuple[sp.csr_matrix, ...]
    bias: float
    clamp: float = OFFICIAL_CLAMP
    source: str = "memory"

    def __post_init__(self) -> None:
        if not isinstance(self.weights, (list, tuple)):
            return  # generated on demand (square by construction): checking would build every layer
        for number, matrix in enumerate(self.weights, start=1):
            if matrix.shape != (self.neurons, self.neurons):
                raise InputError(
                    f"layer {number} is {matrix.shape[0]}x{matrix.shape[1]}; expected "
                    f"{self.neurons}x{self.neurons} ({self.source})"
                )

    @property
    def layers(self) -> int:
        """Number of layers."""
        return len(self.weights)

    @property
    def edges(self) -> int:
        """Total number of weights (non-zeros) over all layers (a lazy sequence of layers that
        knows its count, as a generated network's does, is not built to count them)."""
        known = getattr(self.weights, "edges", None)
        return int(known) if known is not None else int(sum(matrix.nnz for matrix in self.weights))

    def truncated(self, layers: int) -> Network:
        """The first ``layers`` layers of this network."""
        if not 1 <= layers <= self.layers:
            raise InputError(f"asked for {layers} layers; the network {self.source} has {self.layers}")
        if layers == self.layers:
            return self
        return Network(self.neurons, self.weights[:layers], self.bias, self.clamp, self.source)


def _layer_files(directory: Path) -> dict[int, dict[int, Path]]:
    """Map neurons -> layer number -> file, preferring .tsv.gz over .tsv over .mtx."""
    found: dict[int, dict[int, tuple[int, Path]]] = {}
    for entry in directory.iterdir():
        match = _LAYER_NAME.match(entry.name)
        if not match:
            continue
        neurons, layer, suffix = int(match[1]), int(match[2]), match[3]
        rank = _SUFFIX_PREFERENCE.index(suffix)
        current = found.setdefault(neurons, {}).get(layer)
        if current is None or rank < current[0]:
            found[neurons][layer] = (rank, entry)
    return {n: {layer: p for layer, (_, p) in files.items()} for n, files in found.items()}


def read_layer(path: Path, neurons: int) -> sp.csr_matrix:
    """One layer file as a ``neurons x neurons`` float32 CSR matrix (checked as it is read)."""
    if path.suffix == ".mtx":
        return read_matrix_market(path, (neurons, neurons))
    return read_triples_matrix(path, (neurons, neurons), what=f"{neurons} neurons")


def _layer_files_of(directory: Path) -> dict[int, dict[int, Path]]:
    """:func:`_layer_files` of a directory that exists and has some."""
    if not directory.is_dir():
        raise InputError("network directory not found", path=directory)
    by_size = _layer_files(directory)
    if not by_size:
        raise InputError("no layer files named n{N}-l{i}.tsv, .tsv.gz or .mtx", path=directory)
    return by_size


def _only_size(by_size: dict[int, dict[int, Path]], directory: Path) -> int:
    """The one network width present, or an error asking which."""
    if len(by_size) > 1:
        sizes = ", ".join(str(n) for n in sorted(by_size))
        raise InputError(f"layer files for several sizes ({sizes}); say which neurons to use", path=directory)
    return next(iter(by_size))


def network_width(directory: Path) -> int:
    """The neurons of the network in ``directory``, from its layer files' names alone."""
    return _only_size(_layer_files_of(directory), directory)


def layer_paths(
    directory: str | Path, *, neurons: int | None = None, layers: int | None = None
) -> tuple[int, list[Path]]:
    """``(neurons, [layer 1's file, ...])`` of a network directory, read from the names alone.

    ``layers`` defaults to the highest layer number present; every layer from 1 to it must
    have its file: a gap (or a missing ``l1``) raises :class:`InputError` naming the file."""
    directory = Path(directory)
    by_size = _layer_files_of(directory)
    if neurons is None:
        neurons = _only_size(by_size, directory)
    files = by_size.get(neurons)
    if not files:
        sizes = ", ".join(str(n) for n in sorted(by_size))
        raise InputError(f"no layer files for {neurons} neurons (found sizes: {sizes})", path=directory)
    counted = layers is None
    if layers is None:
        layers = max(files)
    if layers < 1:
        raise InputError(f"layers must be at least 1, got {layers}")
    missing = [number for number in range(1, layers + 1) if number not in files]
    if missing:
        expected = directory / f"n{neurons}-l{missing[0]}.tsv.gz"
        where = f"the folder's layer files go up to l{layers}" if counted else f"--layers {layers} asks for it"
        more = f" ({len(missing)} layers missing in all)" if len(missing) > 1 else ""
        raise InputError(
            f"missing layer file {expected.name} (or .tsv / .mtx) for layer {missing[0]}: {where}{more}",
            path=directory,
        )
    return neurons, [files[number] for number in range(1, layers + 1)]


def load_network(
    directory: str | Path,
    *,
    neurons: int | None = None,
    layers: int | None = None,
    bias: float | None = None,
    clamp: float = OFFICIAL_CLAMP,
) -> Network:
    """Load a network directory of ``n{N}-l{i}`` layer files.

    ``neurons`` defaults to the only size present; ``layers`` to every layer up to the
    highest numbered file (all of them present); ``bias`` to the official bias for the size.
    A missing layer file, a layer of the wrong size or a malformed line raises
    :class:`InputError` naming the file.
    """
    directory = Path(directory)
    neurons, paths = layer_paths(directory, neurons=neurons, layers=layers)
    # pandas' C parser releases the GIL while tokenizing, so threads overlap the reads.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        weights = tuple(pool.map(lambda p: read_layer(p, neurons), paths))
    return Network(
        neurons=neurons,
        weights=weights,
        bias=official_bias(neurons) if bias is None else float(bias),
        clamp=clamp,
        source=str(directory),
    )


def write_network(network: Network, directory: str | Path, *, suffix: str = "tsv") -> list[Path]:
    """Write every layer of ``network`` as an official layer file ``n{N}-l{i}.{suffix}``
    (``tsv`` or ``tsv.gz``: 1-based triples) into ``directory`` (created), one file per thread;
    a generated network is built layer by layer as it is written. Returns the paths."""
    if suffix not in ("tsv", "tsv.gz"):
        raise InputError(f"layer files are written as tsv or tsv.gz, not {suffix!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def write(layer: int) -> Path:
        path = directory / f"n{network.neurons}-l{layer + 1}.{suffix}"
        return write_triples(path, network.weights[layer])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(write, range(network.layers)))


def load_inputs(path: str | Path, neurons: int, *, rows: int | None = None) -> sp.csr_matrix:
    """Load input rows (TSV triples or ``.mtx``) as a float32 CSR matrix of ``rows`` x ``neurons``.

    ``rows``: the first that many rows of the file (entries of later rows are left out; a file
    with fewer rows gets empty rows up to it, as its trailing rows may be empty); default: up
    to the largest row index in the file.
    """
    path = Path(path)
    if rows is not None:
        check_row_count(rows, None, str(path))
    named = re.match(r"sparse-images-(\d+)", path.name)  # the official inputs name their width
    if named and int(named.group(1)) != neurons:
        raise InputError(
            f"these inputs are for {named.group(1)}-neuron networks, not this network's {neurons} neurons "
            f"(official inputs are sparse-images-{neurons}*)",
            path=path,
        )
    if path.name.endswith(".mtx"):
        matrix = read_matrix_market(path)
        if matrix.shape[1] != neurons:
            raise InputError(f"inputs have {matrix.shape[1]} columns; the network has {neurons} neurons", path=path)
        if rows is not None:
            check_row_count(rows, matrix.shape[0], str(path))
        return matrix if rows is None else sp.csr_matrix(matrix[:rows])
    what = f"the network's {neurons} neurons"
    if rows is None:
        return read_triples_matrix(path, (None, neurons), what=what)
    try:
        matrix = read_triples_matrix(path, (rows, neurons), what=what)  # one pass, the common case
    except IndexRangeError as exc:
        if exc.axis != "row":
            raise
        return sp.csr_matrix(read_triples_matrix(path, (None, neurons), what=what)[:rows])
    check_row_count(rows, file_rows(matrix), str(path))
    return matrix


def file_rows(matrix: sp.csr_matrix) -> int:
    """The rows a triples file holds: its largest row index (trailing rows without an entry
    cannot be written in one)."""
    filled = np.flatnonzero(np.diff(matrix.indptr))
    return int(filled[-1]) + 1 if filled.size else 0


def check_row_count(rows: int, available: int | None, source: str) -> None:
    """Refuse a row count below 1 or beyond the ``available`` rows of ``source`` (``None``:
    not known yet), naming the source (``--rows`` / ``rows:`` of an experiment)."""
    if rows < 1:
        raise InputError(f"rows {rows}: expected at least 1 input row (--rows, or rows: in an experiment)", path=source)
    if available is not None and rows > available:
        raise InputError(
            f"rows {rows}: the inputs hold {available} rows (--rows, or rows: in an experiment)", path=source
        )


def live_rows(matrix: sp.csr_matrix) -> np.ndarray:
    """0-based indices of the rows of ``matrix`` that hold a non-zero value."""
    if matrix.nnz and (matrix.data == 0).any():
        matrix = matrix.copy()
        matrix.eliminate_zeros()
    return np.flatnonzero(np.diff(matrix.indptr) > 0)
