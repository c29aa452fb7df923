"""Where the package's data folders (``kernels/``, ``sim/``) are, installed or in a checkout.

A wheel carries them inside the package as ``spartan_py/_data/<name>``; a checkout has them
at the repository root beside ``spartan_py/``.
"""

from __future__ import annotations

from pathlib import Path

from spartan_py.errors import SpartanError

_PACKAGE = Path(__file__).resolve().parent
DATA_FOLDERS = ("kernels", "sim")


def data_folder(name: str) -> Path:
    """The folder ``kernels`` or ``sim``, wherever this copy of spartan_py finds it."""
    if name not in DATA_FOLDERS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {DATA_FOLDERS}")
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise SpartanError(f"data folder {name!r} not found beside {_PACKAGE}: the installation is incomplete")


def kernel_source(filename: str) -> str:
    """The text of a CUDA source in ``kernels/``."""
    path = data_folder("kernels") / filename
    if not path.is_file():
        raise SpartanError(f"CUDA source {filename!r} not found in {path.parent}")
    return path.read_text()
