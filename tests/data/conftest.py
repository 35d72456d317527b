"""Helpers for the data-layer tests: small hand-written dataset folders."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest


def write_folder(folder: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``folder`` with ``files`` (name -> content).

    Text goes in as UTF-8, gzip-compressed when the name ends in .gz; bytes go in as given.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if isinstance(content, str):
            content = content.encode("utf-8")
            if name.endswith(".gz"):
                content = gzip.compress(content, mtime=0)
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # a name may have a folder: raw/Y.txt
        (folder / name).write_bytes(content)
    return folder


@pytest.fixture
def make_folder(tmp_path):
    """``make_folder(files, name="ds")`` writes a dataset folder under the test's temporary folder."""

    def make(files: dict[str, str | bytes], name: str = "ds") -> Path:
        return write_folder(tmp_path / name, files)

    return make
