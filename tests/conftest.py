"""Shared fixtures: the official data folder (skipped when absent) and the GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def checkout_env() -> dict[str, str]:
    """The environment in which ``python -m spartan_py`` runs this checkout's package."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


DATA = Path(os.environ.get("SPARTAN_GC_DATA", ROOT.parent / "shared" / "data" / "graph-challenge"))


def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or None."""
    from spartan_py.engines import unavailable_reason

    return unavailable_reason("gpu")


def skip_reasons(reports) -> list[tuple[str, int]]:
    """(reason, tests) of skipped test reports, most tests first: 44 tests skipped for want
    of CuPy are one line, not 44."""
    from collections import Counter

    reasons: Counter[str] = Counter()
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    return reasons.most_common()


def pytest_terminal_summary(terminalreporter):
    """The skipped tests, one line per reason (``addopts`` leaves ``s`` out of ``-r``)."""
    reasons = skip_reasons(terminalreporter.stats.get("skipped", []))
    if reasons:
        terminalreporter.write_sep("-", f"skipped: {sum(count for _, count in reasons)} tests")
        for reason, count in reasons:
            terminalreporter.write_line(f"SKIPPED {count} test{'s' if count != 1 else ''}: {reason}")


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"no GPU: {reason}"))


@pytest.fixture(scope="session")
def gc_data() -> Path:
    """The official Graph Challenge data folder; the test is skipped when it is absent."""
    if not (DATA / "neuron1024").is_dir():
        pytest.skip(f"official data not found at {DATA} (set SPARTAN_GC_DATA)")
    return DATA


@pytest.fixture(scope="session")
def official_network(gc_data):
    from spartan_py import load_network

    return load_network(gc_data / "neuron1024")


@pytest.fixture(scope="session")
def official_first1200(gc_data):
    from spartan_py import load_inputs, read_truth

    inputs = load_inputs(gc_data / "sparse-images-1024-first1200.tsv.gz", 1024, rows=1200)
    return inputs, read_truth(gc_data / "neuron1024-l120-categories-first1200.tsv")


@pytest.fixture(scope="session")
def official_proxy(gc_data):
    from spartan_py import load_inputs, read_truth

    inputs = load_inputs(gc_data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    return inputs, read_truth(gc_data / "neuron1024-l120-categories-proxy60k.tsv")


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module a test runs on: NumPy (CPU path) or CuPy (GPU path)."""
    if request.param == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy
