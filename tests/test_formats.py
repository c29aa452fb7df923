"""File formats: the happy paths and every kind of bad input, with file and line named."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from spartan_py import InputError
from spartan_py.graph_challenge.formats import read_matrix_market, read_triples, read_triples_matrix, read_truth
from spartan_py.graph_challenge.writers import write_triples, write_truth


def _write(path, text):
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["m.tsv", "m.tsv.gz"])
def test_triples_round_trip(tmp_path, name):
    rng = np.random.default_rng(3)
    matrix = sp.random(50, 40, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    matrix.data = np.round(matrix.data * 16) / 16 + 0.0625
    write_triples(tmp_path / name, matrix)
    back = read_triples_matrix(tmp_path / name, (50, 40))
    assert back.dtype == np.float32
    assert (back != matrix).nnz == 0


def test_triples_are_one_based(tmp_path):
    rows, cols, values = read_triples(_write(tmp_path / "a.tsv", "1\t1\t0.5\n3\t2\t1\n"))
    assert rows.tolist() == [0, 2] and cols.tolist() == [0, 1] and values.tolist() == [0.5, 1.0]


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("1\t1\t1\n2\t2\n", 2, "found 2 field"),
        ("1\t1\t1\n2\tx\t1\n", 2, "col index 'x' is not an integer"),
        ("1\t1\t1\n\n2\t2\tabc\n", 3, "value 'abc' is not a number"),
        ("1\t1\t1\n0\t2\t1\n", 2, "row index 0 is out of range: expected at least 1"),
        ("1\t1\t1\n2\t2\t1\t7\n", 2, "found 4 field"),
        ("1.5\t1\t1\n", 1, "row index '1.5' is not an integer"),
    ],
)
@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_malformed_triples_name_file_and_line(tmp_path, text, line, fragment, suffix):
    path = _write(tmp_path / f"bad{suffix}", text)
    with pytest.raises(InputError) as info:
        read_triples(path)
    message = str(info.value)
    assert f"{path}:{line}:" in message and fragment in message
    assert info.value.line == line


def test_index_beyond_neurons(tmp_path):
    path = _write(tmp_path / "l.tsv", "1\t1\t1\n2\t2\t1\n5\t1\t1\n")
    with pytest.raises(InputError, match=r"l\.tsv:3: row index 5 is out of range: expected between 1 and 4"):
        read_triples(path, max_row=4, max_col=4)
    path = _write(tmp_path / "c.tsv", "1\t1\t1\n\n2\t9\t1\n")
    with pytest.raises(InputError, match=r"c\.tsv:3: col index 9"):
        read_triples(path, max_row=4, max_col=4)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(InputError, match="file is empty"):
        read_triples(_write(tmp_path / "e.tsv", ""))
    with pytest.raises(InputError, match="no data lines"):
        read_triples(_write(tmp_path / "blank.tsv", "\n\n"))
    with pytest.raises(InputError, match="file not found"):
        read_triples(tmp_path / "nope.tsv")


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "x.tsv.gz"
    path.write_bytes(gzip.compress(b"1\t1\t1\n" * 1000)[:-20])
    with pytest.raises(InputError, match="x.tsv.gz"):
        read_triples(path)


@pytest.mark.parametrize("field, symmetry", [("real", "general"), ("pattern", "general"), ("real", "symmetric")])
def test_matrix_market(tmp_path, field, symmetry):
    dense = np.zeros((6, 6), dtype=np.float64)
    dense[0, 1] = dense[1, 0] = 0.25
    dense[3, 3] = 1.0
    dense[5, 2] = dense[2, 5] = 0.5
    matrix = sp.coo_matrix(dense if field == "real" else (dense != 0).astype(float))
    scipy.io.mmwrite(tmp_path / "m.mtx", matrix, field=field, symmetry=symmetry)
    back = read_matrix_market(tmp_path / "m.mtx", (6, 6))
    assert np.allclose(back.toarray(), matrix.toarray())
    with pytest.raises(InputError, match="expected 5x5"):
        read_matrix_market(tmp_path / "m.mtx", (5, 5))


def test_bad_matrix_market(tmp_path):
    with pytest.raises(InputError, match="not a readable MatrixMarket"):
        read_matrix_market(_write(tmp_path / "b.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1\n"))


def test_truth(tmp_path):
    assert read_truth(_write(tmp_path / "t.tsv", "3\n7\n\n12\n")).tolist() == [3, 7, 12]
    assert read_truth(_write(tmp_path / "empty.tsv", "")).size == 0
    with pytest.raises(InputError, match=r"u\.tsv:3: row index 5 does not follow 7"):
        read_truth(_write(tmp_path / "u.tsv", "3\n7\n5\n"))
    with pytest.raises(InputError, match=r"n\.tsv:2: 'x' is not an integer"):
        read_truth(_write(tmp_path / "n.tsv", "3\nx\n"))
    with pytest.raises(InputError, match=r"z\.tsv:1: row index 0 is below 1"):
        read_truth(_write(tmp_path / "z.tsv", "0\n"))
    with pytest.raises(InputError, match="one integer per line"):
        read_truth(_write(tmp_path / "w.tsv", "1 2\n"))
    write_truth(tmp_path / "out.tsv", np.array([9, 2, 4]))
    assert read_truth(tmp_path / "out.tsv").tolist() == [2, 4, 9]


def _pandas_triples(path):
    import pandas as pd

    frame = pd.read_csv(path, sep=r"\s+", header=None, dtype=np.float64, engine="c", compression="infer")
    return frame[0].to_numpy(np.int64) - 1, frame[1].to_numpy(np.int64) - 1, frame[2].to_numpy()


@pytest.mark.parametrize("suffix", ["tsv", "tsv.gz"])
def test_compiled_scanner_reads_what_pandas_reads(tmp_path, suffix):
    from spartan_py.graph_challenge.formats import _scanned

    rng = np.random.default_rng(3)
    matrix = sp.random(500, 300, density=0.1, format="csr", dtype=np.float32, random_state=4)
    matrix.data = (rng.standard_normal(matrix.nnz) * 10.0 ** rng.integers(-6, 6, matrix.nnz)).astype(np.float32)
    path = write_triples(tmp_path / f"m.{suffix}", matrix)
    scanned = _scanned(path)
    assert scanned is not None  # taken by the scanner, not the fallback
    for got, want in zip(scanned, _pandas_triples(path)):
        assert np.array_equal(got - (1 if got.dtype == np.int64 else 0), want)
    odd = tmp_path / "odd.tsv"  # blanks, tabs, CR, a blank line, signs, exponents, a bare fraction
    odd.write_text("1 2 3.5\n\n  4\t5\t-1e-3\r\n7 8 .5\n9\t10\t+2E2\n")
    rows, cols, values = read_triples(odd)
    assert rows.tolist() == [0, 3, 6, 8] and cols.tolist() == [1, 4, 7, 9]
    assert values.tolist() == [3.5, -1e-3, 0.5, 200.0]


def test_scanner_leaves_long_numbers_to_pandas(tmp_path):
    from spartan_py.graph_challenge.formats import _scanned

    path = tmp_path / "long.tsv"
    path.write_text("1 1 0.1234567890123456789012\n2 2 1e-300\n")
    assert _scanned(path) is None
    rows, _, values = read_triples(path)
    assert rows.tolist() == [0, 1] and values.tolist() == [0.1234567890123456789012, 1e-300]


def test_triples_out_of_row_order_or_repeated_are_summed(tmp_path):
    path = tmp_path / "u.tsv"
    path.write_text("2 1 1\n1 3 2\n1 3 1\n")
    matrix = read_triples_matrix(path, (3, 3))
    assert matrix.has_canonical_format and matrix.toarray().tolist() == [[0, 0, 3], [1, 0, 0], [0, 0, 0]]


def test_one_pass_csr_reader_matches_the_general_path(tmp_path):
    from spartan_py.graph_challenge.formats import _file_bytes
    from spartan_py.graph_challenge.tsv_scan import scan_csr

    matrix = sp.random(300, 200, density=0.05, format="csr", dtype=np.float32, random_state=5)
    matrix.data = np.round(matrix.data * 64) / 64 + 1 / 64
    matrix = sp.vstack([sp.csr_matrix((3, 200)), matrix, sp.csr_matrix((4, 200))]).tocsr()  # empty first, last rows
    path = write_triples(tmp_path / "m.tsv", matrix)
    indptr, indices, data, ok = scan_csr(_file_bytes(path), 307, 200)
    assert ok  # taken by the one-pass reader
    assert np.array_equal(indptr, matrix.indptr) and np.array_equal(indices, matrix.indices)
    assert np.array_equal(data, matrix.data)
    back = read_triples_matrix(path, (307, 200))
    assert back.has_canonical_format and (back != matrix).nnz == 0


@pytest.mark.parametrize(
    "text, why",
    [("1 2 1\n1 1 1\n", "columns out of order"), ("1 1 1\n1 1 2\n", "repeated"), ("1 5 1\n", "col out of range")],
)
def test_one_pass_csr_reader_declines_what_the_general_path_handles(tmp_path, text, why):
    from spartan_py.graph_challenge.formats import _file_bytes
    from spartan_py.graph_challenge.tsv_scan import scan_csr

    path = _write(tmp_path / "d.tsv", text)
    assert not scan_csr(_file_bytes(path), 4, 4)[3], why
    if "range" in why:
        with pytest.raises(InputError, match=r"col index 5 is out of range") as caught:
            read_triples_matrix(path, (4, 4))
        assert ":1" in str(caught.value)
    else:
        assert read_triples_matrix(path, (4, 4)).has_canonical_format


def test_one_pass_csr_reader_does_not_take_a_prefix_for_the_line_before(tmp_path):
    from spartan_py.graph_challenge.formats import _file_bytes
    from spartan_py.graph_challenge.tsv_scan import scan_csr

    # row 1 then row 12, value 0.5 then 0.55 then 0.5: the fields before are prefixes
    path = _write(tmp_path / "p.tsv", "1\t1\t0.5\n1\t2\t0.55\n12\t3\t0.5\n12\t4\t0.5")  # no last LF
    indptr, indices, data, ok = scan_csr(_file_bytes(path), 12, 4)
    assert ok
    assert indptr.tolist() == [0] + [2] * 11 + [4] and indices.tolist() == [0, 1, 2, 3]
    assert data.tolist() == [0.5, np.float32(0.55), 0.5, 0.5]


def test_other_layouts_in_csr_order_read_the_same(tmp_path):
    from spartan_py.graph_challenge.formats import _file_bytes
    from spartan_py.graph_challenge.tsv_scan import scan_csr

    path = _write(tmp_path / "s.tsv", "1 1 0.5\r\n1  3\t2\r\n\n3 2 1e0\n")
    assert not scan_csr(_file_bytes(path), 3, 3)[3]  # spaces, CR, a blank line: the general path
    assert read_triples_matrix(path, (3, 3)).toarray().tolist() == [[0.5, 0, 2], [0, 0, 0], [0, 1, 0]]
