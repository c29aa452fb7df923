"""Readers of the Sparse DNN Graph Challenge file formats (writers: :mod:`~spartan_py.graph_challenge.writers`).

* TSV triples ``row<TAB>col<TAB>value``, 1-based, plain or gzipped (``.gz``): layers and
  input rows.
* MatrixMarket ``.mtx`` coordinate files (pattern or real, general or symmetric).
* Truth ("categories") files: sorted 1-based row indices, one per line.

The TSV reader parses with a compiled scanner (:mod:`~spartan_py.graph_challenge.tsv_scan`)
that releases the GIL (layers read on several threads at once). A file as every writer makes
it (tabs, CSR order) is scanned straight into the CSR arrays in one pass; anything else is
scanned into triples and sorted, falling back to pandas' C parser for what the scanner does
not take (a value of more than 18 digits or a large exponent); only when that fails, or a
value is out of range, does a slow line-by-line pass run to find the first bad line and name it.
"""

from __future__ import annotations

import gzip
import mmap
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

from spartan_py.errors import InputError
from spartan_py.graph_challenge.tsv_scan import scan_csr, scan_triples, sorted_row_pointers

TRIPLE_HINT = "expected three numbers 'row<TAB>col<TAB>value' with 1-based integer row and col"


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, stripped text) for every non-blank line."""
    with _open_text(path) as handle:
        for number, text in enumerate(handle, start=1):
            text = text.strip()
            if text:
                yield number, text


def _diagnose_triples(path: Path) -> InputError:
    """Find the first malformed line of a triples file; return the error to raise."""
    for number, text in _data_lines(path):
        fields = text.split()
        if len(fields) != 3:
            return InputError(f"found {len(fields)} field(s) {text[:60]!r}; {TRIPLE_HINT}", path=path, line=number)
        for name, field in zip(("row", "col"), fields[:2]):
            try:
                index = int(field)
            except ValueError:
                return InputError(f"{name} index {field!r} is not an integer; {TRIPLE_HINT}", path=path, line=number)
            if index < 1:
                return InputError(f"{name} index {index} is below 1; indices are 1-based", path=path, line=number)
        try:
            value = float(fields[2])
        except ValueError:
            return InputError(f"value {fields[2]!r} is not a number; {TRIPLE_HINT}", path=path, line=number)
        if not np.isfinite(value):
            return InputError(f"value {fields[2]!r} is not finite", path=path, line=number)
    return InputError(f"could not parse the file; {TRIPLE_HINT}", path=path)


def _line_of_record(path: Path, record: int) -> int:
    """1-based file line of the ``record``-th (0-based) non-blank line."""
    for position, (number, _) in enumerate(_data_lines(path)):
        if position == record:
            return number
    return -1


class IndexRangeError(InputError):
    """A triple's row or column index outside its bound; ``axis`` is ``"row"`` or ``"col"``."""

    def __init__(self, message: str, *, axis: str, path: Path, line: int | None):
        self.axis = axis
        super().__init__(message, path=path, line=line)


def _check_index_range(path: Path, name: str, values: np.ndarray, limit: int | None, what: str) -> None:
    bad = np.flatnonzero(values < 1) if limit is None else np.flatnonzero((values < 1) | (values > limit))
    if bad.size:
        first = int(bad[0])
        bound = "at least 1" if limit is None else f"between 1 and {limit} ({what})"
        raise IndexRangeError(
            f"{name} index {int(values[first])} is out of range: expected {bound}",
            axis=name,
            path=path,
            line=_line_of_record(path, first),
        )


def _file_bytes(path: Path) -> np.ndarray | None:
    """The bytes of ``path`` (gunzipped for ``.gz``: a damaged stream raises InputError) as
    uint8, or None where they cannot be read (the careful reader then names the problem). A
    plain file is mapped, not copied: the scanner reads the page cache itself, and threads
    loading many layers at once do not queue on allocating and faulting in a private copy of each."""
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as handle:
                return np.frombuffer(handle.read(), dtype=np.uint8)
        except (OSError, EOFError, zlib.error) as exc:  # no parser reads past a damaged stream: say so
            raise InputError(f"cannot read file: a damaged or incomplete gzip stream ({exc})", path=path) from None
    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, EOFError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    return np.frombuffer(mapped, dtype=np.uint8)  # the array keeps the mapping open


def _scanned(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The triples of ``path`` by :func:`scan_triples`, or None where it does not take them."""
    return _scanned_text(_file_bytes(path))


def _scanned_text(text: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    if text is None:
        return None
    rows, cols, values, ok = scan_triples(text)
    return (rows, cols, values) if ok and rows.size else None


def _existing_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path, or an error if it is not a non-empty file."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    if path.stat().st_size == 0:
        raise InputError(f"file is empty; {TRIPLE_HINT}", path=path)
    return path


def read_triples(
    path: str | os.PathLike,
    *,
    max_row: int | None = None,
    max_col: int | None = None,
    what: str = "neurons",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a TSV triples file (plain or ``.gz``).

    Returns 0-based ``rows`` and ``cols`` (int64) and ``values`` (float64). ``max_row`` and
    ``max_col`` bound the 1-based indices; a violation raises :class:`InputError` naming the
    file and line. ``what`` names the bound in messages (e.g. "neurons").
    """
    path = _existing_file(path)
    return _parse_triples(path, _file_bytes(path), max_row, max_col, what)


def _parse_triples(
    path: Path, text: np.ndarray | None, max_row: int | None, max_col: int | None, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`read_triples` of ``path`` whose bytes (None: unreadable) are ``text``."""
    scanned = _scanned_text(text)
    if scanned is not None:
        rows, cols, values = scanned
        if not np.isfinite(values).all():
            raise _diagnose_triples(path)
        _check_index_range(path, "row", rows, max_row, what)
        _check_index_range(path, "col", cols, max_col, what)
        return rows - 1, cols - 1, values
    try:
        frame = pd.read_csv(
            path,
            sep=r"\s+",
            header=None,
            names=["row", "col", "value"],
            dtype={"row": np.int64, "col": np.int64, "value": np.float64},
            engine="c",
            compression="infer",
        )
    except pd.errors.EmptyDataError:
        raise InputError(f"file has no data lines; {TRIPLE_HINT}", path=path) from None
    except (ValueError, pd.errors.ParserError, OverflowError):
        raise _diagnose_triples(path) from None
    except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
        raise InputError(f"cannot read file: {exc}", path=path) from None
    if frame.empty:
        raise InputError(f"file has no data lines; {TRIPLE_HINT}", path=path)
    values = frame["value"].to_numpy()
    if frame.isna().to_numpy().any() or not np.isfinite(values).all():
        raise _diagnose_triples(path)
    rows = frame["row"].to_numpy()
    cols = frame["col"].to_numpy()
    _check_index_range(path, "row", rows, max_row, what)
    _check_index_range(path, "col", cols, max_col, what)
    return rows - 1, cols - 1, values


def read_triples_matrix(
    path: str | os.PathLike, shape: tuple[int | None, int | None], *, what: str = "neurons"
) -> sp.csr_matrix:
    """Read a triples file into a float32 CSR matrix of ``shape``.

    A ``None`` dimension is taken from the largest index in the file. Duplicate entries
    are summed, as MATLAB's ``sparse`` does.
    """
    path = _existing_file(path)
    text = _file_bytes(path)
    n_rows, n_cols = shape
    if text is not None and n_rows is not None and n_cols is not None and max(text.size, n_rows, n_cols) < 2**31:
        indptr, indices, data, ok = scan_csr(text, n_rows, n_cols)
        if ok:  # the common case, in one pass
            return sp.csr_matrix((data, indices, indptr.astype(np.int32)), shape=(n_rows, n_cols))
    rows, cols, values = _parse_triples(path, text, n_rows, n_cols, what)
    n_rows = shape[0] if shape[0] is not None else int(rows.max()) + 1
    n_cols = shape[1] if shape[1] is not None else int(cols.max()) + 1
    pointers = sorted_row_pointers(rows, cols, n_rows)
    if pointers.size:  # already in CSR order: no sort, no duplicates to sum
        index_type = np.int32 if max(n_rows, n_cols, rows.size) < 2**31 else np.int64
        return sp.csr_matrix(
            (values.astype(np.float32), cols.astype(index_type), pointers.astype(index_type)), shape=(n_rows, n_cols)
        )
    matrix = sp.csr_matrix((values.astype(np.float32), (rows, cols)), shape=(n_rows, n_cols))
    matrix.sum_duplicates()
    return matrix


def read_matrix_market(path: str | os.PathLike, shape: tuple[int, int] | None = None) -> sp.csr_matrix:
    """Read a MatrixMarket coordinate file (pattern or real, general or symmetric) as float32 CSR."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    if path.stat().st_size == 0:
        raise InputError("file is empty; expected a MatrixMarket coordinate file", path=path)
    try:
        matrix = scipy.io.mmread(path)
    except Exception as exc:  # scipy raises ValueError, IndexError, OSError... on bad files
        raise InputError(f"not a readable MatrixMarket coordinate file: {exc}", path=path) from None
    if not sp.issparse(matrix):
        raise InputError("MatrixMarket file is in array (dense) format; expected coordinate", path=path)
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    if shape is not None and matrix.shape != tuple(shape):
        raise InputError(f"matrix is {matrix.shape[0]}x{matrix.shape[1]}; expected {shape[0]}x{shape[1]}", path=path)
    return matrix


def read_truth(path: str | os.PathLike) -> np.ndarray:
    """Read a truth (categories) file: strictly increasing 1-based row indices, one per line.

    An empty file is valid (no row survives). Returns int64 1-based indices.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    indices: list[int] = []
    for number, text in _data_lines(path):
        fields = text.split()
        if len(fields) != 1:
            raise InputError(f"expected one integer per line, found {text[:60]!r}", path=path, line=number)
        try:
            value = int(fields[0])
        except ValueError:
            raise InputError(f"{fields[0]!r} is not an integer row index", path=path, line=number) from None
        if value < 1:
            raise InputError(f"row index {value} is below 1; indices are 1-based", path=path, line=number)
        if indices and value <= indices[-1]:
            raise InputError(
                f"row index {value} does not follow {indices[-1]}; expected strictly increasing indices",
                path=path,
                line=number,
            )
        indices.append(value)
    return np.asarray(indices, dtype=np.int64)
