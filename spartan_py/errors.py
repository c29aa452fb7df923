"""Exceptions raised by spartan_py.

Every error a user can cause (a bad file, a bad argument, a missing device) is a
subclass of :class:`SpartanError`, so the CLI can turn it into a one-line message and
exit status 2 without ever showing a traceback from deep inside NumPy.
"""

from __future__ import annotations

from pathlib import Path


class SpartanError(Exception):
    """Base class of every error spartan_py raises on purpose."""


class InputError(SpartanError):
    """Bad user input: a malformed file, a wrong shape, an unknown name.

    ``path`` and ``line`` (1-based), when known, are part of the message so that the user
    can open the file at the right place.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        self.path = None if path is None else Path(path)
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)


class BackendUnavailableError(SpartanError):
    """A backend was asked for but cannot run here (no GPU, no CuPy, no Numba)."""


class DeviceMemoryError(SpartanError):
    """Something did not fit in device memory even after batching."""


class TimeLimitError(SpartanError):
    """A run stopped because it went past the time limit it was given."""


class OptionalDependencyError(SpartanError):
    """A feature needs an optional extra that is not installed (the message says which)."""


class StorageError(SpartanError, OSError):
    """A file could not be written (a full disk, no permission); the message names the path."""
