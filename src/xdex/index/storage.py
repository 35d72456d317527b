"""Index folders on disk: checked array files and a JSON of metadata with file checksums.

A saved index is a folder holding its data files and ``index.json``, which names the index
kind, its settings and the SHA-256 of every data file. Each file is written atomically
(:mod:`xdex.atomic`), ``index.json`` last. Loading checks all of it, so a missing, truncated,
edited or foreign folder gives an error naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from xdex.atomic import atomic_path, atomic_write_text
from xdex.data.errors import DataFormatError, Problem
from xdex.jsonfile import parse_json_line

META_NAME = "index.json"
FORMAT = "xdex-index"
VERSION = 1


def corrupt(path: str | Path, message: str) -> DataFormatError:
    """The error for an index file that cannot be used."""
    return DataFormatError([Problem(str(path), None, message)])


def save_array(path: Path, array: np.ndarray) -> None:
    """Write ``array`` with ``numpy.save``, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def load_array(path: Path, dtype: type, shape: tuple[int, ...], mmap: bool = False) -> np.ndarray:
    """Read a ``numpy.save`` file and check its dtype and shape; ``mmap``: memory-map it copy-on-write (pages are
    read from the file on use and shared with other processes; the array is writeable, so torch can wrap its
    blocks without a copy, and nothing written would reach the file)."""
    try:
        array = np.load(path, mmap_mode="c" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise corrupt(path, f"not a readable .npy file ({e})") from None
    if array.dtype != dtype or array.shape != shape:
        raise corrupt(path, f"holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} {shape}")
    return array


def file_digest(path: Path) -> str:
    """SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_meta(folder: Path, kind: str, meta: dict[str, Any], files: list[str]) -> None:
    """Write ``index.json`` for an index of ``kind`` whose data ``files`` are already in ``folder``."""
    record = {"format": FORMAT, "version": VERSION, "kind": kind, **meta}
    record["files"] = {name: file_digest(folder / name) for name in files}
    atomic_write_text(folder / META_NAME, json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_meta(folder: str | os.PathLike[str], kind: str | None = None, verify: bool = True) -> dict[str, Any]:
    """Read and check ``index.json`` of a saved index (of ``kind`` when given), that its files are there and,
    if ``verify``, their checksums (a caller that checked them already passes False)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"index folder {folder} does not exist")
    path = folder / META_NAME
    if not path.is_file():
        raise corrupt(path, "missing: the folder is not a saved xdex index")
    try:
        meta = parse_json_line(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:  # syntax, nesting, numbers and texts Python refuses
        raise corrupt(path, f"not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise corrupt(path, f'not an xdex index description (no "format": "{FORMAT}")')
    if meta.get("version") != VERSION:
        raise corrupt(path, f"format version {meta.get('version')!r} is not supported (expected {VERSION})")
    if kind is not None and meta.get("kind") != kind:
        raise corrupt(path, f"holds an index of kind {meta.get('kind')!r}, not {kind!r}")
    files = meta.get("files")
    if not isinstance(files, dict):
        raise corrupt(path, 'no "files" table')
    for name, digest in files.items():
        if Path(name).name != name:
            raise corrupt(path, f'file name {name!r} in "files" is not a plain file name')
        data = folder / name
        if not data.is_file():
            raise corrupt(data, f"missing (listed in {META_NAME})")
        if verify and file_digest(data) != digest:
            raise corrupt(data, f"checksum differs from {META_NAME}: the file is corrupt or from another save")
    return meta
