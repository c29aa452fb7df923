"""Readers and writers for the Sparse DNN Graph Challenge file formats.

* TSV triples ``row<TAB>col<TAB>value``, 1-based, plain or gzipped (``.gz``): layers and
  input rows.
* MatrixMarket ``.mtx`` coordinate files (pattern or real, general or symmetric).
* Truth ("categories") files: sorted 1-based row indices, one per line.

The TSV reader parses with a compiled scanner that releases the GIL (layers read on several
threads at once). A file as every writer makes it (tabs, CSR order) is scanned straight
into the CSR arrays in one pass; anything else is scanned into triples and sorted, falling back to
pandas' C parser for what the scanner does not take (a value of more than 18 digits or a
large exponent); only when that fails, or a value is out of range, does a slow
line-by-line pass run to find the first bad line and name it.
"""

from __future__ import annotations

import gzip
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, atomic_write_text

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


#: Powers of ten exactly representable in float64 (10**22 is the largest).
_EXACT_POWERS = np.array([10.0**k for k in range(23)])


@numba.njit(cache=True, nogil=True)
def _scan_number(text, at, end):  # pragma: no cover - compiled
    """Parse one number at ``text[at]``: (value, is_integer, next position, ok). Exact for
    up to 18 significant digits and a decimal exponent of at most 22 either way (one
    division or product of two exact float64s, correctly rounded); anything else is not ok."""
    negative = False
    if at < end and (text[at] == 45 or text[at] == 43):  # '-' '+'
        negative = text[at] == 45
        at += 1
    mantissa = 0
    digits = 0
    scale = 0
    seen = False
    integer = True
    while at < end and 48 <= text[at] <= 57:
        if mantissa or text[at] != 48:
            digits += 1
        mantissa = mantissa * 10 + (text[at] - 48)
        seen = True
        at += 1
    if at < end and text[at] == 46:  # '.'
        integer = False
        at += 1
        while at < end and 48 <= text[at] <= 57:
            if mantissa or text[at] != 48:
                digits += 1
            mantissa = mantissa * 10 + (text[at] - 48)
            scale -= 1
            seen = True
            at += 1
    if not seen or digits > 18:
        return 0.0, False, at, False
    if at < end and (text[at] == 101 or text[at] == 69):  # 'e' 'E'
        integer = False
        at += 1
        sign = 1
        if at < end and (text[at] == 45 or text[at] == 43):
            sign = -1 if text[at] == 45 else 1
            at += 1
        exponent = 0
        exp_seen = False
        while at < end and 48 <= text[at] <= 57 and exponent < 1000:
            exponent = exponent * 10 + (text[at] - 48)
            exp_seen = True
            at += 1
        if not exp_seen:
            return 0.0, False, at, False
        scale += sign * exponent
    if scale < -22 or scale > 22 or mantissa >= 2**53:
        return 0.0, False, at, False
    value = float(mantissa)
    value = value / _EXACT_POWERS[-scale] if scale < 0 else value * _EXACT_POWERS[scale]
    return -value if negative else value, integer, at, True


@numba.njit(cache=True, nogil=True)
def _scan_plain_decimal(text, at, end):  # pragma: no cover - compiled
    """The common value ``[-]digits[.digits]`` of at most 18 digits, no exponent, at
    ``text[at]``: (value, next position, ok); not ok sends it to :func:`_scan_number`.
    (The 18-digit bound counts leading zeros, so this takes a subset of what that takes,
    and gives the same correctly rounded value.)"""
    negative = at < end and text[at] == 45
    if negative:
        at += 1
    start = at
    mantissa = 0
    while at < end and 48 <= text[at] <= 57:
        mantissa = mantissa * 10 + (text[at] - 48)
        at += 1
    whole = at - start
    fraction = 0
    if at < end and text[at] == 46:  # '.'
        at += 1
        start = at
        while at < end and 48 <= text[at] <= 57:
            mantissa = mantissa * 10 + (text[at] - 48)
            at += 1
        fraction = at - start
    ok = 0 < whole + fraction <= 18 and not (at < end and (text[at] == 101 or text[at] == 69))
    value = mantissa / _EXACT_POWERS[fraction] if ok else 0.0
    return (-value if negative else value), at, ok


@numba.njit(cache=True, nogil=True)
def _scan_index(text, at, end):  # pragma: no cover - compiled
    """Parse a plain run of 1 to 18 digits at ``text[at]``: (value, next position, ok)."""
    value = 0
    start = at
    while at < end and 48 <= text[at] <= 57:
        value = value * 10 + (text[at] - 48)
        at += 1
    return value, at, start < at <= start + 18


#: What :func:`_scan_record` found at a position.
_RECORD, _BLANK, _END, _BAD = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def _scan_record(text, at, end):  # pragma: no cover - compiled
    """One line ``row col value`` (blanks or tabs between) of ``text`` from ``at``:
    (row, col, value, next position, kind), kind one of _RECORD, _BLANK (a blank line),
    _END or _BAD (anything the careful readers should look at)."""
    while at < end and (text[at] == 32 or text[at] == 9 or text[at] == 13):
        at += 1
    if at >= end:
        return 0, 0, 0.0, at, _END
    if text[at] == 10:
        return 0, 0, 0.0, at + 1, _BLANK
    row, at, ok = _scan_index(text, at, end)
    at, separated = _skip_separator(text, at, end)
    if not (ok and separated):
        return 0, 0, 0.0, at, _BAD
    col, at, ok = _scan_index(text, at, end)
    at, separated = _skip_separator(text, at, end)
    if not (ok and separated):
        return 0, 0, 0.0, at, _BAD
    value, after, ok = _scan_plain_decimal(text, at, end)
    if not ok:
        value, _, after, ok = _scan_number(text, at, end)
    at = after
    while at < end and (text[at] == 32 or text[at] == 9 or text[at] == 13):
        at += 1
    if not ok or (at < end and text[at] != 10):
        return 0, 0, 0.0, at, _BAD
    return row, col, value, at + 1, _RECORD


@numba.njit(cache=True, nogil=True)
def _skip_separator(text, at, end):  # pragma: no cover - compiled
    """Skip the blanks and tabs at ``text[at]``: (next position, whether there was one)."""
    start = at
    while at < end and (text[at] == 32 or text[at] == 9):
        at += 1
    return at, at > start


@numba.njit(cache=True, nogil=True)
def _line_count(text):  # pragma: no cover - compiled
    lines = 1
    for i in range(text.size):
        lines += text[i] == 10
    return lines


@numba.njit(cache=True, nogil=True)
def _scan_triples(text):  # pragma: no cover - compiled
    """Records ``row col value`` (one per line, blank lines skipped) of the bytes ``text``:
    (rows, cols, values, ok). Not ok on anything else, so the caller falls back to the
    careful reader."""
    lines = _line_count(text)
    rows = np.empty(lines, np.int64)
    cols = np.empty(lines, np.int64)
    values = np.empty(lines, np.float64)
    count = 0
    at = 0
    while True:
        row, col, value, at, kind = _scan_record(text, at, text.size)
        if kind == _END:
            break
        if kind == _BAD:
            return rows[:0], cols[:0], values[:0], False
        if kind == _RECORD:
            rows[count] = row
            cols[count] = col
            values[count] = value
            count += 1
    return rows[:count], cols[:count], values[:count], True


@numba.njit(cache=True, nogil=True)
def _same_bytes(text, a, b, length):  # pragma: no cover - compiled
    for k in range(length):
        if text[a + k] != text[b + k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _scan_csr(text, n_rows, n_cols):  # pragma: no cover - compiled
    """The bytes ``text`` straight into float32 CSR arrays (indptr int64, indices int32,
    data) of an ``n_rows`` x ``n_cols`` matrix, when the file is as every writer of these
    files makes it: lines ``row<TAB>col<TAB>value<LF>`` (the last LF optional), in row-major order with no repeat,
    indices in range, values plain decimals. One pass and no intermediate arrays, so many
    threads scale; a row or value written as on the line before (the rule: 32 lines a row,
    one weight value) is compared, not parsed again. Not ok on anything else; the caller
    then takes the general path, which reads other layouts and names what is wrong."""
    end = text.size
    lines = _line_count(text)
    indptr = np.zeros(n_rows + 1, np.int64)
    indices = np.empty(lines, np.int32)
    data = np.empty(lines, np.float32)
    count = 0
    last_row = -1  # 0-based, of the line before
    last_col = -1
    row_at, row_length = 0, 0  # where the line before's row and value fields are written
    value_at, value_length, value = 0, 0, 0.0
    at = 0
    while at < end:
        if (
            row_length
            and at + row_length < end
            and text[at + row_length] == 9
            and _same_bytes(text, at, row_at, row_length)
        ):
            row = last_row
            at += row_length
        else:
            start = at
            row, at, ok = _scan_index(text, at, end)
            if not ok or at >= end or text[at] != 9:
                return indptr, indices[:0], data[:0], False
            row -= 1
            row_at, row_length = start, at - start
        col, at, ok = _scan_index(text, at + 1, end)
        if not ok or at >= end or text[at] != 9:
            return indptr, indices[:0], data[:0], False
        col -= 1
        at += 1
        if (
            value_length
            and at + value_length < end
            and text[at + value_length] == 10
            and _same_bytes(text, at, value_at, value_length)
        ):
            at += value_length
        else:
            start = at
            value, at, ok = _scan_plain_decimal(text, at, end)
            if not ok or (at < end and text[at] != 10):  # (the last line may lack its LF)
                return indptr, indices[:0], data[:0], False
            value_at, value_length = start, at - start
        at += 1
        if not (0 <= row < n_rows and 0 <= col < n_cols):
            return indptr, indices[:0], data[:0], False
        if row < last_row or (row == last_row and col <= last_col):
            return indptr, indices[:0], data[:0], False
        while last_row < row:
            last_row += 1
            indptr[last_row] = count
        indices[count] = col
        data[count] = value
        last_col = col
        count += 1
    for r in range(last_row + 1, n_rows + 1):
        indptr[r] = count
    return indptr, indices[:count], data[:count], count > 0


def _file_bytes(path: Path) -> np.ndarray | None:
    """The bytes of ``path`` (gunzipped for ``.gz``) as uint8, or None where they cannot be
    read (the careful reader then names the problem). A plain file is mapped, not copied:
    the scanner reads the page cache itself, and threads loading many layers at once do not
    queue on allocating and faulting in a private copy of each."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return np.frombuffer(handle.read(), dtype=np.uint8)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, EOFError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    return np.frombuffer(mapped, dtype=np.uint8)  # the array keeps the mapping open


def _scanned(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The triples of ``path`` by :func:`_scan_triples`, or None where it does not take them."""
    return _scanned_text(_file_bytes(path))


def _scanned_text(text: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    if text is None:
        return None
    rows, cols, values, ok = _scan_triples(text)
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
        indptr, indices, data, ok = _scan_csr(text, n_rows, n_cols)
        if ok:  # the common case, in one pass
            return sp.csr_matrix((data, indices, indptr.astype(np.int32)), shape=(n_rows, n_cols))
    rows, cols, values = _parse_triples(path, text, n_rows, n_cols, what)
    n_rows = shape[0] if shape[0] is not None else int(rows.max()) + 1
    n_cols = shape[1] if shape[1] is not None else int(cols.max()) + 1
    pointers = _sorted_row_pointers(rows, cols, n_rows)
    if pointers.size:  # already in CSR order: no sort, no duplicates to sum
        index_type = np.int32 if max(n_rows, n_cols, rows.size) < 2**31 else np.int64
        return sp.csr_matrix(
            (values.astype(np.float32), cols.astype(index_type), pointers.astype(index_type)), shape=(n_rows, n_cols)
        )
    matrix = sp.csr_matrix((values.astype(np.float32), (rows, cols)), shape=(n_rows, n_cols))
    matrix.sum_duplicates()
    return matrix


@numba.njit(cache=True, nogil=True)
def _sorted_row_pointers(rows, cols, n_rows):  # pragma: no cover - compiled
    """CSR row pointers of (rows, cols) when the entries are in row-major order with no
    repeated entry (as every writer of these files makes them), else an empty array."""
    pointers = np.zeros(n_rows + 1, np.int64)
    for k in range(rows.size):
        if k and (rows[k] < rows[k - 1] or (rows[k] == rows[k - 1] and cols[k] <= cols[k - 1])):
            return pointers[:0]
        pointers[rows[k] + 1] += 1
    for r in range(n_rows):
        pointers[r + 1] += pointers[r]
    return pointers


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


def write_triples(path: str | os.PathLike, matrix: sp.spmatrix) -> Path:
    """Write a sparse matrix as 1-based TSV triples, gzipped when ``path`` ends in ``.gz``.

    Entries are written row by row, columns ascending; values with 9 significant digits
    (every float32 reads back exactly). The text is formatted by a compiled loop, so a
    65536-neuron layer (2M lines) takes a fraction of a second.
    """
    csr = sp.csr_matrix(matrix)
    csr.sum_duplicates()
    csr.sort_indices()
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr)) + 1
    values, codes = np.unique(csr.data.astype(np.float32), return_inverse=True)
    texts = [f"{float(v):.9g}".encode() for v in values]
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(t) for t in texts])
    table = np.frombuffer(b"".join(texts), dtype=np.uint8)
    text = _triples_text(rows, csr.indices.astype(np.int64) + 1, codes.astype(np.int64).ravel(), table, starts)
    data = text.tobytes()
    if Path(path).suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return atomic_write_bytes(path, data)


@numba.njit(cache=True, nogil=True)
def _digits(value):  # pragma: no cover - compiled
    count = 1
    while value >= 10:
        value //= 10
        count += 1
    return count


@numba.njit(cache=True, nogil=True)
def _put_int(out, at, value):  # pragma: no cover - compiled
    end = at + _digits(value)
    position = end
    while True:
        position -= 1
        out[position] = 48 + value % 10
        value //= 10
        if value == 0:
            break
    return end


@numba.njit(cache=True, nogil=True)
def _triples_text(rows, cols, codes, table, starts):  # pragma: no cover - compiled
    """``row<TAB>col<TAB>value<LF>`` lines as bytes; value ``i`` is ``table[starts[c]:starts[c+1]]``
    for ``c = codes[i]``."""
    size = 0
    for i in range(rows.size):
        size += _digits(rows[i]) + _digits(cols[i]) + starts[codes[i] + 1] - starts[codes[i]] + 3
    out = np.empty(size, dtype=np.uint8)
    at = 0
    for i in range(rows.size):
        at = _put_int(out, at, rows[i])
        out[at] = 9
        at = _put_int(out, at + 1, cols[i])
        out[at] = 9
        at += 1
        for k in range(starts[codes[i]], starts[codes[i] + 1]):
            out[at] = table[k]
            at += 1
        out[at] = 10
        at += 1
    return out


def write_truth(path: str | os.PathLike, categories: np.ndarray) -> Path:
    """Write 1-based category indices, one per line, atomically."""
    text = "".join(f"{int(v)}\n" for v in np.sort(np.asarray(categories)))
    return atomic_write_text(path, text)
