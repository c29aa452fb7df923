"""Shared by the benchmark scripts: where results go and what each result file records."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "graph-challenge"


def commit() -> str:
    """The checkout's commit, with ``+dirty`` when the tree has uncommitted changes.

    Where the tree has no git history (a copy sent to a GPU machine), ``$SPARTAN_COMMIT``
    names it: set it from the checkout the copy was made from.
    """
    if os.environ.get("SPARTAN_COMMIT"):
        return os.environ["SPARTAN_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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
    """Write ``payload`` plus provenance to ``<out_dir>/<name>-<date>.json`` atomically."""
    from spartan_py.files import atomic_write_text

    now = _dt.datetime.now(_dt.timezone.utc)
    record = {
        "benchmark": name,
        "device": device,
        "date": now.isoformat(timespec="seconds"),
        "commit": commit(),
        "command": command_line(),
        "python": platform.python_version(),
        **payload,
    }
    path = (out_dir or RESULTS) / f"{name}-{now:%Y%m%d-%H%M%S}.json"
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def set_machine_header(path: Path, key: str, value) -> None:
    """Set a top-level ``key: value`` line of a machine file (before ``specs:``; JSON is YAML)."""
    from spartan_py.files import atomic_write_text

    lines = path.read_text().splitlines()
    line = f"{key}: {json.dumps(value)}"
    lines = [x for x in lines if not x.startswith(f"{key}:")]
    lines.insert(next(i for i, x in enumerate(lines) if x.startswith("specs:")), line)
    atomic_write_text(path, "\n".join(lines) + "\n")
