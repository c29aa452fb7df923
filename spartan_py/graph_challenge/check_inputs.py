"""Graph Challenge files checked whole before any work (``spartan run`` and its ``--check``).

Every layer file and the inputs are read once, as loading reads them: a gzip stream complete,
every line three numbers with 1-based integer indices in range and a finite value, the layer
files contiguous from ``l1`` (a gap names the missing file), each layer ``N x N``, the row
count within the inputs, a truth file sorted 1-based indices. A problem raises
:class:`~spartan_py.errors.InputError` naming the file (and its line where there is one).
What was checked is kept per file state (path, size, modification time), so a sweep's points
over the same files read them once.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spartan_py.errors import InputError
from spartan_py.graph_challenge.formats import read_truth
from spartan_py.graph_challenge.network import check_row_count, file_rows, layer_paths, load_inputs, read_layer


def _state(path: Path) -> tuple[str, int, int]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", path=path) from None
    return str(path), stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=4096)
def _checked_layer(path: str, size: int, mtime_ns: int, neurons: int) -> None:
    read_layer(Path(path), neurons)


@functools.lru_cache(maxsize=64)
def _input_rows(path: str, size: int, mtime_ns: int, neurons: int) -> int:
    matrix = load_inputs(path, neurons)
    return matrix.shape[0] if path.endswith(".mtx") else file_rows(matrix)


@functools.lru_cache(maxsize=64)
def _checked_truth(path: str, size: int, mtime_ns: int) -> None:
    read_truth(path)


def check_network_files(directory: str | Path, *, layers: int | None = None) -> tuple[int, int]:
    """``(neurons, layers)`` of the network in ``directory``, every layer file read and checked
    (on threads, as loading does)."""
    neurons, paths = layer_paths(directory, layers=layers)
    states = [_state(path) for path in paths]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda state: _checked_layer(*state, neurons), states))
    return neurons, len(paths)


def check_inputs_file(path: str | Path, neurons: int, rows: int | None = None) -> int:
    """The rows of the inputs file at ``path`` (read and checked for ``neurons`` columns);
    ``rows``, when given, must be 1 to that."""
    path = Path(path)
    if rows is not None:
        check_row_count(rows, None, str(path))
    available = _input_rows(*_state(path), neurons)
    if rows is not None:
        check_row_count(rows, available, str(path))
    return available


def check_truth_file(path: str | Path) -> None:
    """Read and check a truth (categories) file."""
    _checked_truth(*_state(Path(path)))
