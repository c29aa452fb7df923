"""Fashion-MNIST's IDX files (``*-idx3-ubyte.gz`` images, ``*-idx1-ubyte.gz`` labels) as NumPy."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from spartan_py.errors import InputError

#: split -> (images file, labels file)
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_MAGIC = {3: 2051, 1: 2049}


def _read_idx(path: Path, dims: int) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"cannot read a gzipped IDX file ({exc})", path=path) from None
    if len(data) < 4 + 4 * dims:
        raise InputError("too short for an IDX header", path=path)
    magic = int.from_bytes(data[:4], "big")
    if magic != _MAGIC[dims]:
        raise InputError(f"IDX magic {magic}, expected {_MAGIC[dims]} ({dims}-D uint8)", path=path)
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise InputError(f"holds {body.size} bytes of data, the header says {shape}", path=path)
    return body.reshape(shape)


def load_split(folder: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 ``[n x 28 x 28]``, labels uint8 ``[n]``) of ``split`` (``train`` or ``test``)."""
    folder = Path(folder)
    if split not in FILES:
        raise InputError(f"split must be one of {', '.join(FILES)}, got {split!r}")
    if not folder.is_dir():
        raise InputError("not a folder of Fashion-MNIST's IDX .gz files", path=folder)
    images_name, labels_name = FILES[split]
    images, labels = _read_idx(folder / images_name, 3), _read_idx(folder / labels_name, 1)
    if images.shape[0] != labels.shape[0]:
        raise InputError(f"{images.shape[0]} images but {labels.shape[0]} labels", path=folder)
    return images, labels
