"""The front page and the docs site stay what the project promises: a short README whose
example runs, an API reference covering every exported name, and result files the docs cite."""

from __future__ import annotations

import fnmatch
import re

import numpy as np

import spartan_py
from tests.conftest import ROOT


def test_readme_is_a_front_page_whose_python_example_runs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "bash scripts/quickstart.sh" in text and "bash scripts/test.sh" in text
    namespace: dict = {"np": np}
    exec(re.search(r"```python\n(.*?)```", text, re.S).group(1), namespace)  # noqa: S102 - our own README
    assert namespace["profile"].tile_density < 0.5
    assert np.allclose(namespace["c"], namespace["y"] @ namespace["w"], atol=1e-4)


def test_api_reference_covers_every_exported_name():
    text = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: spartan_py\.(\w+)$", text, re.M))
    # a name that is also a module's (``calibrate``) is documented by its full path, or the
    # page would show the module in its place
    documented |= set(re.findall(r"^::: spartan_py\.[\w.]+\.(\w+)$", text, re.M))
    assert set(spartan_py.__all__) <= documented
    entries = re.findall(r"^::: (spartan_py\.[\w.]+)$", text, re.M)
    assert len(entries) == len(set(entries)), "an object documented twice"


def test_every_docs_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == set(re.findall(r": ([\w-]+\.md)$", nav, re.M))


def test_results_folder_holds_summaries_only():
    files = [p for p in (ROOT / "benchmarks" / "results").rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".py", ".patch", ".log")]
    assert sum(p.stat().st_size for p in files) <= 1 << 20
    index = (ROOT / "benchmarks" / "results" / "README.md").read_text()
    listed = re.findall(r"^\| `([^`]+)`", index, re.M)  # a file, a folder/ or a pattern with *
    for path in files:
        name = path.relative_to(ROOT / "benchmarks" / "results").as_posix()
        if path.name == "README.md":
            continue
        assert any(
            fnmatch.fnmatch(name, entry) or (entry.endswith("/") and name.startswith(entry)) for entry in listed
        ), f"{name} is not described in benchmarks/results/README.md"
    for entry in listed:  # and every entry names something that is there
        assert any(
            fnmatch.fnmatch(
                p.relative_to(ROOT / "benchmarks" / "results").as_posix(), entry + ("*" if entry.endswith("/") else "")
            )
            for p in files
        ), entry


def test_cost_model_page_stays_within_its_cap():
    lines = (ROOT / "docs" / "cost-model.md").read_text().splitlines()
    assert len(lines) <= 300
    assert any(line.startswith("## The rule of validation") for line in lines)
