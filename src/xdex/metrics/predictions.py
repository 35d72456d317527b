"""Prediction files: read them into a :class:`Ranking`, write a ranking out.

Formats, chosen by the file name's extension:

* ``.jsonl`` (or ``.jsonl.gz``): one object per test row,
  ``{"id": <test row>, "labels": [label ids, best first], "scores": [floats]}``; rows may come in
  any order, blank lines are skipped, and every test row must have its row (empty lists for no
  predictions), so that a truncated file is an error rather than a low score.
* ``.npz``: an ``N x L`` scipy sparse score matrix (``scipy.sparse.save_npz``).
* ``.txt``: the same matrix in the Extreme Classification Repository text format, a
  ``rows cols`` header, then one line per row of ``label:score`` tokens.

In a score matrix the stored entries are the predictions, ranked by score with ties by lower
label id. Every problem found is reported with the file and line (:class:`DataFormatError`).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.atomic import atomic_path
from xdex.data.errors import UNREADABLE_NPZ, DataFormatError, Problem, ProblemLog
from xdex.jsonfile import beyond_float, cut, parse_json_line
from xdex.metrics.ranking import Ranking, top_k
from xdex.sparse import SparseMatrix

FORMATS = (".jsonl", ".jsonl.gz", ".npz", ".txt")


def prediction_format(path: str | Path) -> str:
    """The format of a prediction file from its name: one of :data:`FORMATS`."""
    name = Path(path).name.lower()
    for suffix in FORMATS:
        if name.endswith(suffix):
            return suffix
    raise ValueError(f"{path}: unknown prediction file type; use one of {', '.join(FORMATS)}")


def read_predictions(path: str | Path, n_rows: int, n_labels: int, k: int | None = None) -> Ranking:
    """Read predictions for ``n_rows`` test documents over ``n_labels`` labels.

    ``k`` keeps the ``k`` best predictions of each row (default: all of them).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prediction file not found: {path}")
    fmt = prediction_format(path)
    if fmt in (".jsonl", ".jsonl.gz"):
        ranking = _read_jsonl(path, n_rows, n_labels)
        return ranking if k is None or k >= ranking.k else Ranking(ranking.indices[:, :k], ranking.scores[:, :k])
    matrix = _read_npz(path, n_rows, n_labels) if fmt == ".npz" else _read_xc_text(path, n_rows, n_labels)
    widest = int(np.diff(matrix.indptr).max(initial=0))
    return top_k(matrix, max(1, widest if k is None else min(k, widest)))


def write_predictions(path: str | Path, ranking: Ranking, n_labels: int) -> None:
    """Write a ranking in the format named by the extension of ``path`` (atomically)."""
    fmt = prediction_format(path)
    if fmt in (".jsonl", ".jsonl.gz"):
        _write_jsonl(path, ranking, gzipped=fmt == ".jsonl.gz")
    else:
        write_score_matrix(path, ranking.to_csr(n_labels))


def write_score_matrix(path: str | Path, matrix: SparseMatrix) -> None:
    """Write a sparse score matrix as ``.npz`` or XC text ``.txt`` (atomically)."""
    fmt = prediction_format(path)
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    with atomic_path(path) as tmp:
        if fmt == ".npz":
            with open(tmp, "wb") as f:
                sp.save_npz(f, matrix)
        elif fmt == ".txt":
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(f"{matrix.shape[0]} {matrix.shape[1]}\n")
                for i in range(matrix.shape[0]):
                    start, end = matrix.indptr[i], matrix.indptr[i + 1]
                    cols, values = matrix.indices[start:end], matrix.data[start:end]
                    f.write(" ".join(f"{c}:{v}" for c, v in zip(cols.tolist(), values, strict=True)) + "\n")
        else:
            raise ValueError(f"{path}: a score matrix is written as .npz or .txt, not {fmt}")


def _write_jsonl(path: str | Path, ranking: Ranking, gzipped: bool) -> None:
    with atomic_path(path) as tmp:
        with (gzip.open(tmp, "wt", encoding="utf-8") if gzipped else open(tmp, "w", encoding="utf-8")) as f:
            for i in range(ranking.n_rows):
                keep = ranking.indices[i] >= 0
                row = {"id": i, "labels": ranking.indices[i, keep].tolist(), "scores": ranking.scores[i, keep].tolist()}
                f.write(json.dumps(row) + "\n")


def _lines(path: Path, log: ProblemLog) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of a UTF-8 text file, gzip-compressed if named ``*.gz``.

    A line that is not UTF-8 is reported and skipped; a truncated gzip stream is reported.
    """
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        number = 0
        try:
            for number, raw in enumerate(f, 1):
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    log.add(path, number, f"not UTF-8 text ({e.reason} at byte {e.start})")
        except (OSError, EOFError, zlib.error) as e:
            log.add(path, number + 1, f"cannot be read: {e}")


def _read_jsonl(path: Path, n_rows: int, n_labels: int) -> Ranking:
    log = ProblemLog()
    labels: list[list[int]] = [[] for _ in range(n_rows)]
    scores: list[list[float]] = [[] for _ in range(n_rows)]
    seen_on: dict[int, int] = {}
    for number, line in _lines(path, log):
        if not line.strip():
            continue
        try:
            record = parse_json_line(line.rstrip())
        except json.JSONDecodeError as e:
            log.add(path, number, f"not valid JSON: {e.msg} (column {e.colno})")
            continue
        except ValueError as e:  # nested too deeply, a lone surrogate, a number Python refuses
            log.add(path, number, f"not valid JSON: {e}")
            continue
        problem = _record_problem(record, n_rows, n_labels)
        if problem is None and record["id"] in seen_on:
            problem = f"duplicate id {record['id']} (first on line {seen_on[record['id']]})"
        if problem is not None:
            log.add(path, number, problem)
            continue
        row = record["id"]
        seen_on[row] = number
        labels[row] = record["labels"]
        scores[row] = [float(s) for s in record["scores"]]
    if not log and len(seen_on) < n_rows:
        missing = next(i for i in range(n_rows) if i not in seen_on)
        log.add(path, None, f"has prediction rows for {len(seen_on)} of the {n_rows} test rows (the first missing "
                f'"id" is {missing}); a truncated file? Every test row needs a row, with empty "labels" and '
                '"scores" when it has no predictions')
    log.raise_if_any()
    return Ranking.from_lists(labels, scores)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _record_problem(record: object, n_rows: int, n_labels: int) -> str | None:
    """What is wrong with one JSONL prediction record, or None."""
    if not isinstance(record, dict):
        return f"expected a JSON object, found {type(record).__name__}"
    for key in ("id", "labels", "scores"):
        if key not in record:
            return f'missing "{key}"'
    row, labels, scores = record["id"], record["labels"], record["scores"]
    if not _is_int(row):
        return f'"id" must be an integer, found {_shown(row)}'
    if not 0 <= row < n_rows:
        return f'"id" {row} is out of range: the test split has {n_rows} rows (ids 0..{n_rows - 1})'
    if not isinstance(labels, list) or not isinstance(scores, list):
        return '"labels" and "scores" must be lists'
    if len(labels) != len(scores):
        return f"{len(labels)} labels but {len(scores)} scores"
    for position, label in enumerate(labels):
        if not _is_int(label) or not 0 <= label < n_labels:
            return f"label {_shown(label)} at position {position} is not a label id (0..{n_labels - 1})"
    if len(set(labels)) != len(labels):
        return "a label id appears twice in one row"
    for position, score in enumerate(scores):
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            return f"score {_shown(score)} at position {position} is not a number"
        if beyond_float(score):
            return f"score {_shown(score)} at position {position} is beyond the range of a float"
        if math.isnan(score):
            return f"score nan at position {position} is not a number"
    return None



def _shown(value: object) -> str:
    """``repr(value)`` for a message, cut short: a line may hold megabytes."""
    try:
        return cut(repr(value))
    except (RecursionError, ValueError):  # nested too deeply for repr; an int too long for str
        return f"<{type(value).__name__}>"


def _read_npz(path: Path, n_rows: int, n_labels: int) -> sp.csr_matrix:
    try:
        matrix = sp.csr_matrix(sp.load_npz(path))
    except UNREADABLE_NPZ as e:
        raise DataFormatError([Problem(str(path), None, f"not a scipy sparse .npz score matrix ({e})")]) from None
    problem = None
    if matrix.shape != (n_rows, n_labels):
        rows, cols = matrix.shape
        problem = f"the score matrix is {rows} x {cols} but the test split is {n_rows} x {n_labels}"
    elif not (np.issubdtype(matrix.dtype, np.integer) or np.issubdtype(matrix.dtype, np.floating)):
        problem = f"the scores must be real numbers, found dtype {matrix.dtype}"
    elif np.issubdtype(matrix.dtype, np.floating) and np.isnan(matrix.data).any():
        problem = f"row {_row_of(matrix, int(np.flatnonzero(np.isnan(matrix.data))[0]))} has a NaN score"
    else:
        matrix.sort_indices()
        repeats = np.flatnonzero(np.diff(matrix.indices) == 0)
        repeats = repeats[_row_of(matrix, repeats) == _row_of(matrix, repeats + 1)]
        if repeats.size:
            problem = f"row {_row_of(matrix, int(repeats[0]))} stores label {matrix.indices[repeats[0]]} twice"
    if problem:
        raise DataFormatError([Problem(str(path), None, problem)])
    return matrix


def _row_of(matrix: sp.csr_matrix, entry: np.ndarray | int) -> np.ndarray | int:
    """Row of the given stored-entry position(s) of a CSR matrix."""
    return np.searchsorted(matrix.indptr, entry, side="right") - 1


def _read_xc_text(path: Path, n_rows: int, n_labels: int) -> sp.csr_matrix:
    log = ProblemLog()
    lines = _lines(path, log)
    number, header = next(lines, (0, ""))
    shape = header.split()
    if number == 0:
        if not log:
            log.add(path, None, f"the file is empty; expected a 'rows cols' header and {n_rows} rows of predictions")
    elif len(shape) != 2 or not all(_is_count(part) for part in shape):
        log.add(path, number, f"expected a 'rows cols' header, found {_shown(header.strip())}")
    elif (_count(shape[0]), _count(shape[1])) != (n_rows, n_labels):
        log.add(path, number, f"the header says {cut(shape[0])} x {cut(shape[1])} but the test split is "
                f"{n_rows} x {n_labels}")
    log.raise_if_any()
    indptr: list[int] = [0]
    cols: list[int] = []
    values: list[float] = []
    for number, line in lines:
        if len(indptr) > n_rows:
            if line.strip():
                log.add(path, number, f"more than the {n_rows} rows the header announces")
                break
            continue  # trailing blank lines
        problem = _parse_xc_line(line, n_labels, cols, values)
        if problem:
            log.add(path, number, problem)
        indptr.append(len(cols))
    if len(indptr) <= n_rows and not log:
        log.add(path, None, f"has {len(indptr) - 1} rows of predictions but the header says {n_rows}")
    log.raise_if_any()
    return sp.csr_matrix((np.asarray(values, dtype=np.float64), np.asarray(cols, dtype=np.int64), indptr),
                         shape=(n_rows, n_labels))


def _is_count(text: str) -> bool:
    """Whether ``text`` is a non-negative decimal integer."""
    return text.isascii() and text.isdigit()


def _count(text: str) -> int:
    """The value of a :func:`_is_count` text, or -1 for one of more than 18 digits (no row or label count is
    that large, and Python refuses to convert a text of thousands of digits)."""
    return int(text) if len(text) <= 18 else -1


def _parse_xc_line(line: str, n_labels: int, cols: list[int], values: list[float]) -> str | None:
    """Append the ``label:score`` tokens of one line to ``cols`` and ``values``; the problem, if any."""
    row_cols, row_values = [], []
    for token in line.split():
        label, sep, score = token.partition(":")
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not sep or not _is_count(label) or math.isnan(value):
            return f"token {_shown(token)} is not label:score"
        if not 0 <= _count(label) < n_labels:
            return f"label id {cut(label)} is out of range (0..{n_labels - 1})"
        row_cols.append(int(label))
        row_values.append(value)
    if len(set(row_cols)) != len(row_cols):
        return "a label id appears twice in one row"
    cols.extend(row_cols)
    values.extend(row_values)
    return None
