"""Result files of the cost model's tooling and of the speed checks: a payload with where,
when, at which commit and by which command it was made, written atomically."""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import platform
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, atomic_write_text


def _plain(value: Any) -> Any:
    """JSON's stand-in for NumPy scalars and arrays (a pandas table's cells)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_result(
    name: str,
    device: str,
    payload: Mapping[str, Any],
    out_dir: Path,
    *,
    commit: str,
    command: str,
    packed: bool = False,
) -> Path:
    """Write ``payload`` with its provenance to ``<out_dir>/<name>-<date>.json`` (``.json.gz``
    with ``packed``: every launch's price is kept compressed) atomically; returns the path."""
    now = _dt.datetime.now(_dt.timezone.utc)
    record = {
        "benchmark": name,
        "device": device,
        "date": now.isoformat(timespec="seconds"),
        "commit": commit,
        "command": command,
        "python": platform.python_version(),
        **payload,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-{now:%Y%m%d-%H%M%S}.json"
    text = json.dumps(record, indent=2, default=_plain) + "\n"
    if packed:
        return atomic_write_bytes(path.with_suffix(".json.gz"), gzip.compress(text.encode(), mtime=0))
    return atomic_write_text(path, text)


def rewrite_result(path: Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` (a whole result, provenance included) over the result file ``path``,
    atomically, gzipped where its name says so."""
    text = json.dumps(record, indent=2, default=_plain) + "\n"
    if path.suffix == ".gz":
        return atomic_write_bytes(path, gzip.compress(text.encode(), mtime=0))
    return atomic_write_text(path, text)


def _read_json(path: str | Path, what: str) -> Any:
    """The JSON in ``path``, gzipped where its name ends in ``.gz``; a missing, truncated or
    corrupt file is an :class:`~spartan_py.errors.InputError` naming it (``what`` it should be)."""
    try:
        raw = Path(path).read_bytes()
        return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        raise InputError(f"not a readable {what} ({exc or type(exc).__name__})", path=path) from None


def read_result(path: Path) -> dict:
    """A result file written by :func:`write_result` (gzipped or not); a missing or unreadable
    one is an :class:`~spartan_py.errors.InputError` naming the file."""
    return _read_json(path, "result file")


def read_summary(path: str | Path) -> Any:
    """A JSON summary file, plain or gzipped (``.gz``); an unreadable one is an
    :class:`~spartan_py.errors.InputError` naming the file."""
    return _read_json(path, "JSON summary")
