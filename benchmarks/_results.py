"""Shared by the benchmark scripts: where results go and what each result file records."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "graph-challenge"


def commit() -> str:
    """The checkout's commit, with ``+dirty`` when the tree has uncommitted changes
    (:func:`spartan_py.runner.store.package_commit`).

    Where the tree has no git history (a copy sent to a GPU machine), ``$SPARTAN_COMMIT``
    names it: set it from the checkout the copy was made from.
    """
    if os.environ.get("SPARTAN_COMMIT"):
        return os.environ["SPARTAN_COMMIT"]
    # deferred: the GPU machine runs speed checks that import this module without the runner's dependencies
    from spartan_py.runner.store import package_commit

    return package_commit(dirty=True) or "unknown"


def _relative(arg: str) -> str:
    """``arg`` relative to the repository when it is a path inside it."""
    path = Path(arg)
    if path.is_absolute() and path.resolve().is_relative_to(ROOT):
        return str(path.resolve().relative_to(ROOT)) or "."
    return arg


def command_line() -> str:
    """How this benchmark was started, run from the repository root: a script of
    ``benchmarks/`` as ``python -m benchmarks.NAME``, paths inside the repository relative."""
    script, *args = sys.argv
    here = Path(script).resolve()
    if here.parent == ROOT / "benchmarks":
        words = ["python", "-m", f"benchmarks.{here.stem}"]
    else:
        words = ["python", _relative(script)]
    return " ".join(shlex.quote(w) for w in [*words, *map(_relative, args)])


def write_result(name: str, device: str, payload: dict, out_dir: Path | None = None) -> Path:
    """Write ``payload`` plus provenance to ``<out_dir>/<name>-<date>.json`` atomically
    (:func:`spartan_py.result_files.write_result`, with this checkout's commit and command)."""
    from spartan_py.result_files import write_result as write

    return write(name, device, payload, out_dir or RESULTS, commit=commit(), command=command_line())
