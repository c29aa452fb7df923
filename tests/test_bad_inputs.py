"""Bad inputs are refused before any work (issue 74): a corpus of broken files, rows, tiles and
saved maps, each made on the fly, each given to ``spartan run`` and ``spartan run --check``
(and ``spartan infer`` where it reads it): exit 2, a message naming the file or field, and no
point or inference started (the runner's and the API's entry points are replaced by ones that
record a call)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py import cli
from spartan_py.graph_challenge.generate import generate_inputs, generate_network
from spartan_py.graph_challenge.network import write_network
from spartan_py.graph_challenge.writers import write_triples
from spartan_py.workloads.conv.layers import conv_layer

LAYERS = 3


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    """A 1024-neuron network of 3 gzipped layer files, 20 input rows (plain and gzipped)."""
    root = tmp_path_factory.mktemp("good")
    write_network(generate_network(1024, LAYERS, 0), root / "net", suffix="tsv.gz")
    inputs = generate_inputs(20, 1024, 0)
    write_triples(root / "inputs.tsv", inputs)
    write_triples(root / "inputs.tsv.gz", inputs)
    return {"net": root / "net", "inputs": root / "inputs.tsv", "inputs_gz": root / "inputs.tsv.gz"}


@pytest.fixture
def no_work(monkeypatch) -> list[str]:
    """Calls of any point or inference (a test asserts the list stays empty)."""
    called: list[str] = []

    def refuse(name):
        def call(*args, **kwargs):
            called.append(name)
            raise AssertionError(f"{name} ran on a bad input")

        return call

    # the Graph Challenge point runner binds infer and make_engine when first imported: import it
    # now, so that it keeps the real ones after this test, and refuse its bindings too
    import spartan_py.workloads.graph_challenge.point as gc_point

    monkeypatch.setattr("spartan_py.runner.execute.run_point", refuse("run_point"))
    for module in ("spartan_py.api", gc_point.__name__):
        for name in ("infer", "make_engine"):
            monkeypatch.setattr(f"{module}.{name}", refuse(name), raising=module == "spartan_py.api")
    return called


def _copy_net(good, tmp_path: Path) -> Path:
    net = tmp_path / "net"
    net.mkdir()
    for path in good["net"].iterdir():
        (net / path.name).write_bytes(path.read_bytes())
    return net


def _layer(net: Path, number: int) -> Path:
    return net / f"n1024-l{number}.tsv.gz"


def _gz_text(path: Path, text: str) -> None:
    path.write_bytes(gzip.compress(text.encode()))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))


# (id, how to spoil a copy of the good files: returns the workload fields and the file the message names)
def _layer_case(spoil):
    def make(good, tmp_path):
        net = _copy_net(good, tmp_path)
        named = spoil(net)
        return {"network": net, "inputs": good["inputs"]}, named

    return make


def _inputs_case(spoil, gz=False):
    def make(good, tmp_path):
        path = tmp_path / ("inputs.tsv.gz" if gz else "inputs.tsv")
        path.write_bytes(good["inputs_gz" if gz else "inputs"].read_bytes())
        spoil(path)
        return {"network": good["net"], "inputs": path}, path

    return make


def _set_text(text, gz=False):
    def spoil(path: Path) -> None:
        if gz:
            _gz_text(path, text)
        else:
            path.write_text(text)

    return spoil


def _layer_text(text):
    def spoil(net: Path) -> Path:
        _gz_text(_layer(net, 2), text)
        return _layer(net, 2)

    return spoil


def _remove(number):
    def spoil(net: Path) -> Path:
        _layer(net, number).unlink()
        return _layer(net, number)

    return spoil


def _spoil_layer(how):
    def spoil(net: Path) -> Path:
        how(_layer(net, 2))
        return _layer(net, 2)

    return spoil


def _with_fields(**fields):
    def make(good, tmp_path):
        values = {"network": good["net"], "inputs": good["inputs"]} | fields
        named = values.pop("named", None) or good["inputs"]
        return values, named

    return make


def _truth(text):
    def make(good, tmp_path):
        path = tmp_path / "truth.tsv"
        path.write_text(text)
        return {"network": good["net"], "inputs": good["inputs"], "truth": path}, path

    return make


def _two_sizes(good, tmp_path):
    net = _copy_net(good, tmp_path)
    (net / "n4096-l1.tsv").write_text("1\t1\t0.5\n")
    return {"network": net, "inputs": good["inputs"]}, net


GRAPH_CHALLENGE_CASES = {
    "layer-gzip-corrupted": _layer_case(_spoil_layer(_corrupt)),
    "layer-gzip-truncated": _layer_case(_spoil_layer(_truncate)),
    "layer-empty": _layer_case(_spoil_layer(lambda p: p.write_bytes(b""))),
    "layer-empty-gzip": _layer_case(_layer_text("")),
    "layer-two-columns": _layer_case(_layer_text("1\t2\t0.0625\n3\t4\n")),
    "layer-four-columns": _layer_case(_layer_text("1\t2\t0.0625\t7\n")),
    "layer-non-numeric": _layer_case(_layer_text("1\t2\tabc\n")),
    "layer-zero-based": _layer_case(_layer_text("0\t2\t0.0625\n")),
    "layer-index-beyond-neurons": _layer_case(_layer_text("1\t1025\t0.0625\n")),
    "layer-nan": _layer_case(_layer_text("1\t2\tnan\n")),
    "layer-gap": _layer_case(_remove(2)),
    "layer-l1-missing": _layer_case(_remove(1)),
    "layer-files-of-two-sizes": _two_sizes,
    "inputs-gzip-corrupted": _inputs_case(_corrupt, gz=True),
    "inputs-gzip-truncated": _inputs_case(_truncate, gz=True),
    "inputs-empty": _inputs_case(_set_text("")),
    "inputs-blank-lines": _inputs_case(_set_text("\n\n")),
    "inputs-two-columns": _inputs_case(_set_text("1\t2\n")),
    "inputs-non-numeric-row": _inputs_case(_set_text("x\t2\t1\n")),
    "inputs-zero-based": _inputs_case(_set_text("1\t0\t1\n")),
    "inputs-columns-of-another-width": _inputs_case(_set_text("1\t2000\t1\n")),
    "inputs-nan": _inputs_case(_set_text("1\t2\tnan\n", gz=True), gz=True),
    "inputs-infinite": _inputs_case(_set_text("1\t2\tinf\n")),
    "rows-beyond-the-file": _with_fields(rows=21),
    "rows-beyond-generated": _with_fields(inputs="generated:20", rows=30, named="generated:20"),
    "layers-beyond-the-files": _with_fields(layers=LAYERS + 2, named="n1024-l4.tsv.gz"),
    "truth-not-integers": _truth("1\nx\n"),
    "truth-not-increasing": _truth("3\n2\n"),
}


def _maps(shape, density=0.3, seed=0):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rng.random(shape) + 0.1, 0).astype(np.float32)


CONV3 = conv_layer("alexnet/conv3")  # 256 x 13 x 13 in, 384 x 13 x 13 out


def _npz(**arrays):
    def make(tmp_path):
        path = tmp_path / "maps.npz"
        np.savez(path, **arrays)
        return {"activations": path}, path

    return make


def _raw_maps(data: bytes):
    def make(tmp_path):
        path = tmp_path / "maps.npz"
        path.write_bytes(data)
        return {"activations": path}, path

    return make


def _good_npz_bytes() -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, conv3=_maps((2, 256, 13, 13)))
    return buffer.getvalue()


CONV_CASES = {
    "maps-wrong-channels": _npz(conv3=_maps((2, 128, 13, 13))),
    "maps-wrong-size": _npz(conv3=_maps((2, 256, 14, 14))),
    "maps-three-dimensions": _npz(conv3=_maps((256, 13, 13))),
    "maps-no-images": _npz(conv3=np.zeros((0, 256, 13, 13), np.float32)),
    "maps-nan": _npz(conv3=np.full((1, 256, 13, 13), np.nan, np.float32)),
    "maps-negative": _npz(conv3=-_maps((1, 256, 13, 13)) - 1),
    "maps-missing-array": _npz(conv4=_maps((1, 384, 13, 13))),
    "maps-booleans": _npz(conv3=np.ones((1, 256, 13, 13), bool)),
    "maps-not-a-zip": _raw_maps(b"not a zip file at all"),
    "maps-truncated": _raw_maps(_good_npz_bytes()[:2000]),
    "gradient-mask-wrong-shape": _npz(conv3=_maps((2, 256, 13, 13)), **{"conv3.grad_mask": np.ones((2, 384, 12, 12))}),
    "gradient-mask-other-batch": _npz(conv3=_maps((2, 256, 13, 13)), **{"conv3.grad_mask": np.ones((3, 384, 13, 13))}),
    "gradient-mask-negative": _npz(conv3=_maps((2, 256, 13, 13)), **{"conv3.grad_mask": -np.ones((2, 384, 13, 13))}),
}

TILE_CASES = {
    "tile-not-a-power-of-two": ([64, 30], "cpu", "fp32", "tile cols must be a power of two"),
    "tile-rows-not-a-power-of-two": ([48, 32], "cpu", "fp32", "tile rows must be a power of two"),
    "tile-rows-the-gpu-gemm-lacks": ([8, 32], "gpu", "fp32", "takes tiles of 16, 32, 64, 128 rows"),
    "tile-cols-the-tf32-step-splits": ([64, 16], "gpu", "tf32", "multiples of 32"),
}


def _graph_yaml(fields: dict) -> str:
    lines = [f"  {key}: {value}" for key, value in fields.items()]
    return "name: bad\nworkload:\n" + "\n".join(lines) + "\nbackend: cpu\n"


def _cli(*args) -> int:
    return cli.main([str(a) for a in args])


def _run_both(capsys, tmp_path: Path, text: str) -> list[tuple[int, str]]:
    """``spartan run --check`` and ``spartan run`` of the experiment ``text``: (status, stderr) each."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    results = []
    for extra in (["--check"], ["--out", str(tmp_path / "run"), "--quiet"]):
        status = _cli("run", path, *extra)
        results.append((status, capsys.readouterr().err))
    return results


@pytest.mark.parametrize("case", sorted(GRAPH_CHALLENGE_CASES))
def test_a_bad_graph_challenge_input_is_refused_before_any_work(case, good, tmp_path, capsys, no_work):
    fields, named = GRAPH_CHALLENGE_CASES[case](good, tmp_path)
    for status, err in _run_both(capsys, tmp_path, _graph_yaml(fields)):
        assert status == 2, err
        assert Path(str(named)).name in err, err
        assert len(err.strip().splitlines()) == 1, err  # one line
    assert no_work == []
    assert not (tmp_path / "run" / "points").exists()  # nothing of the run was started


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_bad_saved_maps_are_refused_before_any_work(case, tmp_path, capsys, no_work):
    fields, named = CONV_CASES[case](tmp_path)
    text = (
        f"name: bad\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3]\n  step: training\n"
        f"  activations: {fields['activations']}\nbackend: cpu\ntile: 32\n"
    )
    for status, err in _run_both(capsys, tmp_path, text):
        assert status == 2, err
        assert str(named) in err, err
    assert no_work == []


@pytest.mark.parametrize("case", sorted(TILE_CASES))
def test_a_tile_the_kernels_do_not_take_is_refused_before_any_work(case, tmp_path, capsys, no_work):
    tile, backend, precision, message = TILE_CASES[case]
    text = (
        f"name: bad\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3]\nbackend: {backend}\n"
        f"tile: {tile}\nprecision: {precision}\n"
    )
    for status, err in _run_both(capsys, tmp_path, text):
        assert status == 2, err
        assert f"tile {tile}" in err and message in err, err
    assert no_work == []


def test_the_corpus_holds_thirty_bad_inputs():
    assert len(GRAPH_CHALLENGE_CASES) + len(CONV_CASES) + len(TILE_CASES) >= 30


# spartan infer: the same refusals before any inference


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rows", "-5"], "rows -5: expected at least 1"),  # finding 2: ran 595 rows, exit 0
        (["--rows", "0"], "rows 0: expected at least 1"),  # finding 2: ran, exit 0, 0 edges/s
        (["--rows", "601"], "rows 601: the inputs hold 600 rows"),
        (["--layers", "0"], "layers 0: expected at least 1"),
    ],
)
def test_infer_refuses_bad_rows_and_layers_of_generated_inputs(args, message, capsys, no_work):
    status = _cli("infer", "--network", "generated:1024", "--inputs", "generated:600", "--backend", "cpu", *args)
    err = capsys.readouterr().err
    assert status == 2 and message in err, err
    assert no_work == []


def test_infer_refuses_negative_rows_of_a_file(good, capsys, no_work):
    """Finding 2: on a .tsv.gz this ended in 'unexpected ValueError: negative dimensions', exit 1."""
    status = _cli("infer", "--network", good["net"], "--inputs", good["inputs_gz"], "--rows", "-5")
    err = capsys.readouterr().err
    assert status == 2 and "rows -5" in err and "inputs.tsv.gz" in err, err
    assert no_work == []


@pytest.mark.parametrize("missing", [2, 1])
def test_infer_names_the_missing_layer_file(missing, good, tmp_path, capsys, no_work):
    """Finding 1: a gap ran the layers before it (exit 0); a missing l1 said 'layers must be at
    least 1, got 0' though no --layers was given."""
    net = _copy_net(good, tmp_path)
    _layer(net, missing).unlink()
    status = _cli("infer", "--network", net, "--inputs", good["inputs"], "--backend", "cpu")
    err = capsys.readouterr().err
    assert status == 2 and f"missing layer file n1024-l{missing}.tsv.gz" in err, err
    assert "got 0" not in err
    assert no_work == []


def test_a_parquet_trace_without_pyarrow_is_refused_before_any_work(tmp_path, capsys, no_work, monkeypatch):
    """Finding 6: --trace-out x.parquet ran the inference, then failed with an unexpected
    ImportError (exit 1); no extra installed pyarrow. --help says what .parquet needs."""
    monkeypatch.setattr("spartan_py.trace.parquet_available", lambda: False)
    trace = tmp_path / "x.parquet"
    status = _cli("infer", "--network", "generated:1024", "--inputs", "generated:20", "--trace-out", trace)
    err = capsys.readouterr().err
    assert status == 2 and "x.parquet" in err and "spartan-py[parquet]" in err, err
    assert no_work == []
    with pytest.raises(SystemExit):
        _cli("infer", "--help")
    assert "needs pyarrow" in " ".join(capsys.readouterr().out.split())
    from spartan_py.errors import InputError
    from spartan_py.trace import read_trace

    trace.write_bytes(b"PAR1")  # spartan simulate reads traces: the same refusal, not an ImportError
    with pytest.raises(InputError, match=r"x\.parquet: a \.parquet trace needs pyarrow"):
        read_trace(trace)
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("pyarrow") for dep in extras["optional-dependencies"]["parquet"])


def test_check_reads_every_file_whole(good, tmp_path, capsys):
    """Finding 3: --check said "valid" for a truncated .tsv.gz; the good files still pass."""
    fields = {"network": good["net"], "inputs": good["inputs_gz"], "rows": 20}
    path = tmp_path / "good.yaml"
    path.write_text(_graph_yaml(fields))
    assert _cli("run", str(path), "--check") == 0, capsys.readouterr().err
    assert "valid; 1 point" in capsys.readouterr().out


def test_problems_of_several_points_are_listed_together(good, tmp_path, capsys, no_work):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"name: bad\nworkload:\n  network: {good['net']}\n  inputs: {good['inputs']}\nbackend: cpu\n"
        "sweep:\n  grid:\n    workload.rows: [5, 21, 22]\n"
    )
    status = _cli("run", str(path), "--check")
    err = capsys.readouterr().err
    assert status == 2 and "rows 21" in err and "rows 22" in err and "rows 5:" not in err, err


def test_inputs_shorter_than_rows_are_not_padded(tmp_path):
    from spartan_py import load_inputs
    from spartan_py.errors import InputError

    matrix = sp.csr_matrix(np.eye(3, 1024, dtype=np.float32))
    path = write_triples(tmp_path / "three.tsv", matrix)
    assert load_inputs(path, 1024, rows=2).shape == (2, 1024)
    with pytest.raises(InputError, match="rows 4: the inputs hold 3 rows"):
        load_inputs(path, 1024, rows=4)


# a full disk while writing a run folder


def test_a_full_disk_stops_the_run_naming_the_file_and_leaves_no_half_written_point(tmp_path, capsys, monkeypatch):
    """The second point's file cannot be written (ENOSPC): the run exits non-zero naming it;
    the first point is whole, the second absent (no temporary left), and a rerun with room
    completes it."""
    import errno
    import json
    import os

    path = tmp_path / "two.yaml"
    path.write_text(
        "name: two\nworkload:\n  network: generated:1024\n  layers: 2\n  inputs: generated:20\nbackend: cpu\n"
        "sweep:\n  grid:\n    workload.layers: [2, 3]\n"
    )
    written: list[str] = []
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.stream, name)

    def fdopen(handle, mode="r", *args, **kwargs):
        stream = real_fdopen(handle, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{handle}")  # the temporary file being written
        if "/points/" in name and ".json." in name:
            written.append(name)
            if len(written) == 2:
                return Full(stream)
        return stream

    monkeypatch.setattr("spartan_py.files.os.fdopen", fdopen)
    out = tmp_path / "run"
    status = cli.main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status != 0
    failed = Path(written[1].split("/.")[-1].split(".json.")[0] + ".json")
    assert f"{out}/points/{failed}" in err and "No space left on device" in err, err
    points = sorted((out / "points").iterdir())
    assert [p.name for p in points if p.name.startswith(".")] == []  # no temporary file left
    finished = [p for p in points if p.suffix == ".json"]
    assert len(finished) == 1 and json.loads(finished[0].read_text())["status"] == "ok"
    monkeypatch.setattr("spartan_py.files.os.fdopen", real_fdopen)
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert "1 points run, 1 already done" in capsys.readouterr().out
