"""A dataset folder's files: finding each one among its accepted names, writing a set safely."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from xdex.atomic import atomic_write_bytes
from xdex.data.errors import ProblemLog
from xdex.data.textfile import write_lines


def pick_file(folder: Path, names: Sequence[str], log: ProblemLog) -> Path | None:
    """The file of ``folder`` with one of ``names`` (alternative spellings of one file), or None.

    Two of them present at once is a problem: which one is meant would be a guess.
    """
    present = [name for name in names if (folder / name).is_file()]
    if len(present) > 1:
        log.add(folder, None, f"both {' and '.join(present)} exist; keep only one of them")
    return folder / present[0] if present else None


def check_line_count(path: Path, count: int, expected: int, other: str, log: ProblemLog, first_line: int = 1) -> None:
    """Report at the first missing or extra line if ``path`` has ``count`` rows where ``other`` implies ``expected``."""
    if count < expected:
        log.add(path, first_line + count, f"the file ends after {count} rows, but {other} has {expected}")
    elif count > expected:
        log.add(path, first_line + expected, f"the file has {count} rows, but {other} has only {expected}")


def write_files(
    folder: Path, files: Mapping[str, Iterable[str] | bytes], owned: Iterable[str], overwrite: bool
) -> None:
    """Write ``files`` (name -> lines, or the bytes of a binary file) into ``folder``, each atomically.

    ``owned`` are all the file names the layout may use. Without ``overwrite`` nothing is written
    if any of them exists already; with it, those of them not in ``files`` are removed, so the
    folder never mixes the new dataset with leftovers of an old one.
    """
    folder.mkdir(parents=True, exist_ok=True)
    existing = sorted(name for name in owned if (folder / name).exists())
    if existing and not overwrite:
        raise FileExistsError(f"{folder} already holds {', '.join(existing)}; pass overwrite to replace them")
    for name, content in files.items():
        if isinstance(content, bytes):
            atomic_write_bytes(folder / name, content)
        else:
            write_lines(folder / name, content)
    for name in existing:
        if name not in files:
            (folder / name).unlink()
