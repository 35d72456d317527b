"""Sparse rows: parsing ``col:val`` text, checking ids and values, building CSR matrices.

A sparse text row is a list of whitespace-separated ``col:val`` tokens (0-based ``col``), as
in the Extreme Classification Repository's files, or a comma-separated list of ids (the label
part of a bag-of-words line). All rows of a file are converted at once with numpy (no Python
code runs per token); only when that fails are the rows parsed one at a time, to name each
line and token at fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import methodcaller
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.data.errors import ProblemLog


@dataclass
class Rows:
    """Parsed sparse rows as CSR arrays; a row that failed to parse is empty (and was reported)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def from_lists(cls, ids: Sequence[Sequence[int]], values: Sequence[Sequence[float]] | None = None) -> Rows:
        """Rows from per-row lists of ids and, optionally, values (else 1.0)."""
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(indptr[-1]))
        if values is None:
            data = np.ones(len(indices))
        else:
            data = np.fromiter(chain.from_iterable(values), dtype=np.float64, count=int(indptr[-1]))
        return cls(indptr, indices, data)


def parse_pairs(rows: Sequence[str], path: Path, first_line: int, log: ProblemLog) -> Rows:
    """Parse rows of ``col:val`` tokens; row ``r`` is line ``first_line + r`` of ``path``."""
    try:
        return _pairs_fast(rows)
    except (ValueError, OverflowError):
        return _rows_slow(rows, _pair_row, path, first_line, log)


def parse_ids(rows: Sequence[str], path: Path, first_line: int, log: ProblemLog) -> Rows:
    """Parse rows of comma-separated ids (an empty row has none); values are 1.0."""
    try:
        return _ids_fast(rows)
    except (ValueError, OverflowError):
        return _rows_slow(rows, _id_row, path, first_line, log)


_PAIRS_ROW = re.compile(r"\s*(?:[^\s:]+:[^\s:]+(?!\S)\s*)*")
"""A well-formed row: whitespace-separated tokens with exactly one inner colon each."""


def _pairs_fast(rows: Sequence[str]) -> Rows:
    """All rows at once; raises ValueError if any row is malformed."""
    if not all(map(_PAIRS_ROW.fullmatch, rows)):
        raise ValueError("malformed row")
    lengths = np.fromiter(map(methodcaller("count", ":"), rows), dtype=np.int64, count=len(rows))
    tokens = " ".join(rows).replace(":", " ").split()
    total = len(tokens) // 2
    indices = np.fromiter(map(int, tokens[0::2]), dtype=np.int64, count=total)
    values = np.fromiter(map(float, tokens[1::2]), dtype=np.float64, count=total)
    return Rows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), indices, values)


def _ids_fast(rows: Sequence[str]) -> Rows:
    parts = [row.split(",") if row else [] for row in rows]
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    flat = list(chain.from_iterable(parts))
    indices = np.fromiter(map(int, flat), dtype=np.int64, count=len(flat))
    return Rows(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), indices, np.ones(len(flat)))


def _pair_row(row: str) -> tuple[list[int], list[float]]:
    cols, vals = [], []
    for token in row.split():
        col, _, val = token.partition(":")
        try:
            cols.append(_int(col))
            vals.append(float(val))
        except ValueError:
            raise ValueError(f"'{token}' is not a col:value pair (0-based integer column, number value)") from None
    return cols, vals


def _id_row(row: str) -> tuple[list[int], list[float]]:
    ids = []
    for token in row.split(",") if row else []:
        try:
            ids.append(_int(token))
        except ValueError:
            raise ValueError(f"'{token}' in '{row}' is not an integer id (ids are separated by commas)") from None
    return ids, [1.0] * len(ids)


def _int(token: str) -> int:
    value = int(token)
    if not -(2**63) <= value < 2**63:
        raise ValueError(token)
    return value


def _rows_slow(rows: Sequence[str], parse_row, path: Path, first_line: int, log: ProblemLog) -> Rows:
    ids: list[list[int]] = []
    values: list[list[float]] = []
    for r, row in enumerate(rows):
        try:
            i, v = parse_row(row)
        except ValueError as e:
            log.add(path, first_line + r, str(e))
            i, v = [], []
        ids.append(i)
        values.append(v)
    return Rows.from_lists(ids, values)


def to_csr(
    rows: Rows,
    n_cols: int | None,
    path: Path,
    first_line: int,
    log: ProblemLog,
    what: str,
    positive: bool = True,
) -> sp.csr_matrix:
    """The CSR matrix of ``rows``, after checking every entry.

    Ids must lie in ``[0, n_cols)`` (unchecked above when ``n_cols`` is None, e.g. when the
    file that defines them is missing), appear at most once per row, and have finite values,
    positive if ``positive``. Offending entries are reported (``what`` names the ids, e.g.
    "label") and left out.
    """
    n_rows = len(rows.indptr) - 1
    row_of = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    cols, vals = rows.indices, rows.values
    negative = cols < 0
    too_big = cols >= n_cols if n_cols is not None else np.zeros(len(cols), dtype=bool)
    bad_value = ~np.isfinite(vals) | ((vals <= 0) if positive else False)
    limit = log.max_per_file + 1
    found = _find(negative, row_of, cols, vals, f"{what} id {{c}} is negative", limit)
    if n_cols is not None:
        message = f"{what} id {{c}} is out of range: there are {n_cols} {what}s (ids 0..{n_cols - 1})"
        found += _find(too_big, row_of, cols, vals, message, limit)
    must = "finite and positive" if positive else "finite"
    found += _find(bad_value, row_of, cols, vals, f"{what} {{c}} has value {{v}}; values must be {must}", limit)
    keep = ~(negative | too_big | bad_value)
    if n_cols is None:
        n_cols = int(cols[keep].max()) + 1 if keep.any() else 0
    matrix = _csr(row_of[keep], cols[keep], vals[keep], n_rows, n_cols)

    matrix.sort_indices()  # within each row, so that a repeated id sits next to itself
    row_of = np.repeat(np.arange(n_rows), np.diff(matrix.indptr))
    same = (matrix.indices[1:] == matrix.indices[:-1]) & (row_of[1:] == row_of[:-1])
    repeated = np.concatenate([[False], same])
    if repeated.any():
        message = f"{what} id {{c}} appears more than once in the row"
        found += _find(repeated, row_of, matrix.indices, matrix.data, message, limit)
        matrix = _csr(row_of[~repeated], matrix.indices[~repeated], matrix.data[~repeated], n_rows, n_cols)
    for row, message in sorted(found, key=lambda f: f[0]):
        log.add(path, first_line + row, message)
    return matrix


def _find(
    mask: np.ndarray, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, template: str, limit: int
) -> list[tuple[int, str]]:
    """(row, message) for the first ``limit`` entries in ``mask``; ``template`` may use ``{c}`` and ``{v}``."""
    return [(int(rows[k]), template.format(c=int(cols[k]), v=float(vals[k]))) for k in np.flatnonzero(mask)[:limit]]


def _csr(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int, n_cols: int) -> sp.csr_matrix:
    """A CSR matrix from entries listed row by row."""
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_rows))]).astype(np.int64)
    return sp.csr_matrix((values, cols, indptr), shape=(n_rows, n_cols))


def format_pairs(matrix: sp.csr_matrix) -> Iterator[str]:
    """One ``col:val`` row per matrix row; whole values are written without a decimal point."""
    for r in range(matrix.shape[0]):
        start, end = matrix.indptr[r], matrix.indptr[r + 1]
        columns, values = matrix.indices[start:end].tolist(), matrix.data[start:end].tolist()
        yield " ".join(f"{c}:{_number(v)}" for c, v in zip(columns, values, strict=True))


def _number(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
