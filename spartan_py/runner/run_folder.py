"""A run folder bound to one version of one experiment, and written by one run at a time.

A rerun into a folder resumes it only while the experiment's points are the ones the folder
holds: a point the folder holds that the experiment no longer has (an edited field changes
a point's id) would otherwise sit in the tables beside its replacement, and nobody could tell
the two apart. :func:`stale_points` finds them; :func:`bind_run_folder` refuses them, or
with ``replace_changed`` drops them so that their replacements are computed.

:func:`run_folder_lock` holds an exclusive ``fcntl.flock`` on ``<out>/.lock`` for a whole
run: a second run of the folder waits for it, then finds the first run's points finished and
computes none of them again.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spartan_py.errors import InputError
from spartan_py.runner.store import check_run_folder, point_path

#: The lock file of a run folder (dot-named: no table or report lists it).
LOCK_NAME = ".lock"

#: The flag that drops a changed experiment's old points (named in the refusal; the CLI's).
REPLACE_FLAG = "--replace-changed"


def _stored_config(out: Path) -> dict | None:
    path = out / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _flat(value, prefix: str = "") -> dict[str, object]:
    """``{"a.b": leaf}`` of a nested mapping (lists are leaves)."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, object] = {}
    for key, item in value.items():
        flat |= _flat(item, f"{prefix}.{key}" if prefix else str(key))
    return flat


def changed_fields(before: dict, after: dict) -> list[str]:
    """``field: old -> new`` for each field path whose value differs between two experiment dumps."""
    old, new = _flat(before), _flat(after)
    return [
        f"{name}: {old.get(name, '(unset)')!r} -> {new.get(name, '(unset)')!r}"
        for name in sorted(old.keys() | new.keys())
        if old.get(name, "(unset)") != new.get(name, "(unset)")
    ]


def stored_point_ids(out: Path) -> dict[str, str]:
    """``{id: label}`` of every point the folder holds a result file of (finished or failed;
    a point ``config.json`` lists but no run reached has no rows to mix)."""
    held: dict[str, str] = {}
    for path in sorted((out / "points").glob("*.json")) if (out / "points").is_dir() else []:
        try:
            held[path.stem] = json.loads(path.read_text()).get("label", path.stem)
        except (json.JSONDecodeError, OSError):
            held[path.stem] = path.stem
    return held


def stale_points(out: Path, point_ids: set[str]) -> dict[str, str]:
    """``{id: label}`` of the points ``out`` holds that are not among ``point_ids``."""
    return {pid: label for pid, label in stored_point_ids(out).items() if pid not in point_ids}


def bind_run_folder(out: Path, experiment, points: list, *, replace_changed: bool = False) -> list[str]:
    """Check that ``out`` may take ``points`` of ``experiment``: another experiment's folder is
    refused (:func:`~spartan_py.runner.store.check_run_folder`), and so is a folder holding
    points that the experiment no longer has, unless ``replace_changed``: those points' files
    are then deleted (their replacements are new points, computed by the run). Returns the
    labels of the points dropped."""
    check_run_folder(out, experiment.name)
    stale = stale_points(out, {p.id for p in points})
    if not stale:
        return []
    if not replace_changed:
        config = _stored_config(out)
        fields = changed_fields(config["experiment"], experiment.model_dump(mode="json")) if config else []
        listed = "; ".join(f"{pid} ({label})" for pid, label in list(stale.items())[:8])
        more = f" and {len(stale) - 8} more" if len(stale) > 8 else ""
        count = f"{len(stale)} of its points are" if len(stale) > 1 else "1 of its points is"
        raise InputError(
            f"{out} holds a run of another version of experiment {experiment.name!r}: "
            + (f"changed fields: {'; '.join(fields[:8])}. " if fields else "")
            + f"{count} not a point of the experiment now: {listed}{more}. "
            f"Their rows would sit beside the new points' in the tables and the report: rerun with "
            f"{REPLACE_FLAG} to drop them and compute the changed points, or give a new --out. "
            "A point is its whole configuration, `machines` and the data files' full paths included: "
            "to price a finished run on another machine, `spartan simulate` the folder instead"
        )
    for pid in stale:
        point_path(out, pid).unlink(missing_ok=True)
        for trace in (out / "points").glob(f"{pid}.trace.*"):
            trace.unlink()
    return list(stale.values())


def _holder(handle) -> str:
    handle.seek(0)
    return handle.read().strip() or "another process"


@contextmanager
def run_folder_lock(out: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold ``<out>/.lock`` exclusively while the block runs; if another run holds it, call
    ``on_wait(who holds it)`` once and wait until it is released."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_NAME, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(_holder(handle))
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
