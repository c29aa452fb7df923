"""Writing files so that nothing is lost: a reader sees the old file or the new, never half."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from spartan_py.errors import StorageError


def current_umask() -> int:
    """The process's file-creation mask (read from ``/proc`` where it can be, without changing it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it the only portable way, then put it back at once
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise StorageError(f"{path}: could not be written ({exc.strerror or exc})") from exc
    try:
        # mkstemp creates 0600 whatever the umask; give the file the mode open() would have
        os.fchmod(handle, 0o666 & ~current_umask())
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as exc:  # a full disk, a read-only folder: name the file, leave no part of it
        Path(temporary).unlink(missing_ok=True)
        raise StorageError(f"{path}: could not be written ({exc.strerror or exc}); nothing of it was left") from exc
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode())


def json_ready(value):
    """``value`` with every NaN or infinite float as None (JSON's null: bare ``NaN`` is not
    JSON), NumPy scalars as Python numbers, tuples as lists; dicts and lists walked."""

    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
