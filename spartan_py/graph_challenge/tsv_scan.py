"""The compiled TSV scanner behind :mod:`spartan_py.graph_challenge.formats`: Numba functions that
release the GIL, so that layer files are read on several threads at once. A file as every
writer makes it (tabs, CSR order) is scanned straight into the CSR arrays in one pass
(:func:`scan_csr`); anything else into triples (:func:`scan_triples`), which the reader
sorts. Numbers are parsed exactly for up to 18 significant digits and a decimal exponent of
at most 22 either way; anything else is left to the caller's slower paths."""

from __future__ import annotations

import numba
import numpy as np

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
def line_count(text):  # pragma: no cover - compiled
    lines = 1
    for i in range(text.size):
        lines += text[i] == 10
    return lines


@numba.njit(cache=True, nogil=True)
def scan_triples(text):  # pragma: no cover - compiled
    """Records ``row col value`` (one per line, blank lines skipped) of the bytes ``text``:
    (rows, cols, values, ok). Not ok on anything else, so the caller falls back to the
    careful reader."""
    lines = line_count(text)
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
def scan_csr(text, n_rows, n_cols):  # pragma: no cover - compiled
    """The bytes ``text`` straight into float32 CSR arrays (indptr int64, indices int32,
    data) of an ``n_rows`` x ``n_cols`` matrix, when the file is as every writer of these
    files makes it: lines ``row<TAB>col<TAB>value<LF>`` (the last LF optional), in row-major order with no repeat,
    indices in range, values plain decimals. One pass and no intermediate arrays, so many
    threads scale; a row or value written as on the line before (the rule: 32 lines a row,
    one weight value) is compared, not parsed again. Not ok on anything else; the caller
    then takes the general path, which reads other layouts and names what is wrong."""
    end = text.size
    lines = line_count(text)
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


@numba.njit(cache=True, nogil=True)
def sorted_row_pointers(rows, cols, n_rows):  # pragma: no cover - compiled
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
