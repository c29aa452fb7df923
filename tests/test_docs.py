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
    # the real maps' packed bitmask samples (issue 77: the repository keeps small samples) have
    # a budget of their own; everything else stays summaries
    samples = [p for p in files if p.suffix == ".npz"]
    assert sum(p.stat().st_size for p in samples) <= 5 << 19
    assert sum(p.stat().st_size for p in files if p not in samples) <= 3 << 19
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


# reference pages without history (issue 72): figures come from committed summaries


def _commit_hashes(text: str) -> set[str]:
    """Words of 7-40 hex digits in ``text`` that name a commit of this repository."""
    import subprocess

    words = set(re.findall(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w])", text))
    found = set()
    for word in words:
        ask = subprocess.run(["git", "cat-file", "-e", f"{word}^{{commit}}"], cwd=ROOT, capture_output=True)
        if ask.returncode == 0:
            found.add(word)
    return found


HISTORY_PAGES = {"results.md", "history.md", "cost-model-history.md", "performance-history.md"}


def test_reference_pages_and_readme_hold_no_commit_hash():
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        import pytest

        pytest.skip("no git checkout to tell commits from hex words")
    pages = [p for p in (ROOT / "docs").rglob("*.md") if p.name not in HISTORY_PAGES] + [ROOT / "README.md"]
    offending = {p.relative_to(ROOT).as_posix(): sorted(_commit_hashes(p.read_text())) for p in pages}
    offending = {page: hashes for page, hashes in offending.items() if hashes}
    if "docs/snippets/trust-table.md" in offending:  # included by the results page only
        assert '--8<-- "docs/snippets/trust-table.md"' not in "".join(
            p.read_text() for p in (ROOT / "docs").glob("*.md") if p.name not in HISTORY_PAGES
        )
        del offending["docs/snippets/trust-table.md"]
    assert not offending, f"commit hashes on reference pages (quote the results page instead): {offending}"


def test_results_page_is_made_from_the_committed_summaries():
    from spartan_py.report.results_page import PAGE, render

    assert (ROOT / PAGE).read_text() == render(ROOT), "stale: run python -m spartan_py.report.results_page"


def test_results_page_has_an_entry_per_result_file_and_no_other():
    from spartan_py.report.results_page import RESULTS, anchor, entries

    page = (ROOT / "docs" / "results.md").read_text()
    found = entries(ROOT)
    headings = set(re.findall(r"^### (.+)$", page, re.M))
    assert headings == {e.key.replace("/", " / ") for e in found}
    for path in (ROOT / RESULTS).rglob("*"):
        if path.is_file() and path.name != "README.md":
            assert path.relative_to(ROOT / RESULTS).as_posix() in page, f"{path} is not on the results page"
    anchors = {anchor(e.key) for e in found}
    # every link to an entry, from any page or the README, names one that exists
    for source in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for target in re.findall(r"results\.md#([\w-]+)", source.read_text()):
            assert target in anchors or target in {"which-machines-the-cost-model-validates", "data-files"}, (
                f"{source.name} links to results.md#{target}, which is no entry"
            )


def test_one_name_per_kernel_table_names_real_trace_families():
    from spartan_py.costmodel.families import FAMILIES

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## One name per kernel") :].split("\n## ")[0]
    named = set(re.findall(r"`(gpu\.\w+)`", table))
    assert named and named <= set(FAMILIES), named - set(FAMILIES)


def test_every_link_to_a_docs_heading_names_one():
    def slug(heading: str) -> str:  # as the Markdown table of contents makes an anchor
        return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower())

    headings = {
        page.name: {slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}
        for page in (ROOT / "docs").glob("*.md")
    }
    for source in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for page, target in re.findall(r"\((?:[\w./-]*/)?([\w-]+\.md)#([\w-]+)\)", source.read_text()):
            assert target in headings.get(page, set()), f"{source.name} links to {page}#{target}: no such heading"
