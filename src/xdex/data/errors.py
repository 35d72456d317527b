"""Problems found in user data, reported with the file and line they come from.

Readers never stop at the first problem: they record every problem in a
:class:`ProblemLog`, so that ``xdex data validate`` can list them all, and
loading raises a single :class:`DataFormatError` that names the first ones.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

UNREADABLE_NPZ: tuple[type[Exception], ...] = (
    ValueError, TypeError, KeyError, IndexError, OSError, EOFError, NotImplementedError, RuntimeError, zlib.error,
    zipfile.BadZipFile, zipfile.LargeZipFile)
"""What numpy's and scipy's ``.npz`` readers let through for a damaged or foreign file, to be reported as a problem
of that file: zipfile's errors (among them ``RuntimeError`` for a member marked encrypted and
``NotImplementedError`` for an unknown compression), zlib's for a broken stream, numpy's for a bad array header."""


@dataclass(frozen=True)
class Problem:
    """One problem: the file, the 1-based line (None for the whole file) and what is wrong."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.message}"


class DataFormatError(ValueError):
    """Raised when a dataset cannot be loaded; ``problems`` lists everything found."""

    def __init__(self, problems: list[Problem], shown: int = 5):
        self.problems = list(problems)
        lines = [str(p) for p in self.problems[:shown]]
        more = len(self.problems) - shown
        if more > 0:
            lines.append(f"... and {more} more problem(s); `xdex data validate` lists them all")
        super().__init__("\n".join(lines))


@dataclass
class ProblemLog:
    """Collects problems while reading; ``max_per_file`` bounds the noise of a badly broken file."""

    problems: list[Problem] = field(default_factory=list)
    max_per_file: int = 100
    _counts: dict[str, int] = field(default_factory=dict)

    def add(self, path: str | Path, line: int | None, message: str) -> None:
        key = str(path)
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        if n < self.max_per_file:
            self.problems.append(Problem(key, line, message))
        elif n == self.max_per_file:
            self.problems.append(Problem(key, None, f"more than {self.max_per_file} problems; stopped listing"))

    def __bool__(self) -> bool:
        return bool(self.problems)

    def __len__(self) -> int:
        return len(self.problems)

    def ordered(self) -> list[Problem]:
        """The problems by file (in the order the files were first reported), then line.

        A whole-file problem comes before the file's line problems if it was reported before
        them (an empty file), else after them (e.g. the note that listing stopped).
        """
        files: dict[str, int] = {}
        with_lines: set[str] = set()
        keys = []
        for i, p in enumerate(self.problems):
            files.setdefault(p.path, len(files))
            if p.line is not None:
                with_lines.add(p.path)
            line = p.line if p.line is not None else (math.inf if p.path in with_lines else -1)
            keys.append((files[p.path], line, i))
        return [self.problems[i] for *_, i in sorted(keys)]

    def raise_if_any(self) -> None:
        if self.problems:
            raise DataFormatError(self.ordered())
