"""The CPU twins write the same kernel traces as before issue 72's restructuring.

``tests/data/twin-traces.csv.gz`` holds every launch record of the points in
:data:`tests.twin_traces.CASES` (the official 1024 x 120 network on the first 1200 rows, a
generated 4096 x 120 network, the conv workload's layers; all in simulated mode), as the tree
at 25a78d2 (the round's base, before the workloads moved) wrote them. It was produced from a
checkout of this tree with::

    git worktree add /tmp/old25 25a78d2        # or any copy of its spartan_py/, kernels/, sim/
    SPARTAN_GC_DATA=/path/to/graph-challenge \\
        python -m tests.twin_traces --tree /tmp/old25 --write-golden tests/data/twin-traces.csv.gz

(``--tree`` runs that checkout's ``spartan run`` in a subprocess). Regenerate it only for a
change that is meant to change a trace, and say so in the commit. With
``SPARTAN_TWINS_AGAINST=<checkout>`` the last test compares with that checkout's traces
directly, any case set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spartan_py.trace import TraceRecord
from tests.twin_traces import CASES, DATA, GOLDEN, KEYS, ROOT, compare, read_golden, run_cases


@pytest.fixture(scope="module")
def golden():
    return read_golden()


def test_golden_holds_every_point_of_every_case(golden):
    assert GOLDEN.stat().st_size < 200_000
    assert list(golden.columns) == KEYS + [f.name for f in TraceRecord.__dataclass_fields__.values()]
    points = {(case, point) for case, spec in CASES.items() for point in spec.points}
    assert set(golden.groupby(KEYS).groups) == points
    assert (golden["run"] == golden["point"]).all()
    # twins of both Graph Challenge kernels, and the conv candidates' launches
    families = set(golden["kernel"])
    assert {
        "gpu.gc_layer",
        "gpu.monitor_pass",
        "gpu.gc_merged",
        "gpu.expand",
        "gpu.tile_gemm.fp32",
        "gpu.csr_gemm.fp32",
    } <= families


def test_compare_names_the_field_and_the_launch(golden):
    changed = golden.copy()
    row = changed.index[(changed["case"] == "gc-generated") & (changed["point"] == "merged")][3]
    changed.at[row, "bytes_read"] = "1"
    problems = compare(golden, changed)
    kernel, layer = golden.at[row, "kernel"], golden.at[row, "layer"]
    assert problems == [
        f"gc-generated / merged: launch 3 ({kernel}, layer {layer}) bytes_read: "
        f"{golden.at[row, 'bytes_read']!r} expected, '1'"
    ]
    assert compare(golden, changed.drop(index=row)) != []


@pytest.mark.slow  # about a minute on 2 cores
def test_generated_network_and_conv_layers_match_the_golden(golden, tmp_path):
    names = ["gc-generated", "conv"]
    assert compare(golden[golden["case"].isin(names)], run_cases(ROOT, names, tmp_path)) == []


@pytest.mark.slow  # about a minute on 2 cores
def test_official_network_matches_the_golden(golden, gc_data, tmp_path):
    actual = run_cases(ROOT, ["gc-official"], tmp_path, gc_data)
    assert compare(golden[golden["case"] == "gc-official"], actual) == []


@pytest.mark.slow
def test_against_another_checkout(tmp_path):
    other = os.environ.get("SPARTAN_TWINS_AGAINST")
    if not other:
        pytest.skip("SPARTAN_TWINS_AGAINST (a checkout to compare with) not set")
    names = [name for name, case in CASES.items() if not case.needs_data or (DATA / "neuron1024").is_dir()]
    expected = run_cases(Path(other), names, tmp_path / "other")
    assert compare(expected, run_cases(ROOT, names, tmp_path / "this")) == []
