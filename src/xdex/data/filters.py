"""Filter files: (document, label) pairs to remove from predictions before evaluation.

One pair of 0-based integers ``row label`` per line, as in the ``filter_labels_test.txt`` files
of the Extreme Classification Repository's LF-* datasets (in same-universe data, a document's
link to the label that stands for the document itself). An empty file means no pairs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.data.errors import ProblemLog
from xdex.data.folders import pick_file
from xdex.data.textfile import read_lines


def read_filter(path: Path, n_rows: int | None, n_labels: int | None, log: ProblemLog) -> sp.csr_matrix:
    """The ``n_rows x n_labels`` 0/1 matrix of the pairs in ``path``; bad lines are reported and skipped.

    A bound that is None (its file is missing or broken, which is reported elsewhere) is not checked.
    """
    pairs: dict[tuple[int, int], int] = {}
    for number, line in enumerate(read_lines(path, log, allow_empty=True), 1):
        message = None
        parts = line.split()
        if len(parts) != 2 or not all(p.isdecimal() and p.isascii() for p in parts):
            message = f"expected two non-negative integers 'row label', found '{line}'"
        else:
            row, label = int(parts[0]), int(parts[1])
            if n_rows is not None and row >= n_rows:
                message = f"row {row} is out of range: the split has {n_rows} documents (rows 0..{n_rows - 1})"
            elif n_labels is not None and label >= n_labels:
                message = f"label {label} is out of range: there are {n_labels} labels (ids 0..{n_labels - 1})"
            elif (row, label) in pairs:
                message = f"pair {row} {label} repeats line {pairs[row, label]}"
            else:
                pairs[row, label] = number
        if message:
            log.add(path, number, message)
    rows = np.array([r for r, _ in pairs], dtype=np.int64)
    cols = np.array([c for _, c in pairs], dtype=np.int64)
    shape = (
        n_rows if n_rows is not None else int(rows.max(initial=-1)) + 1,
        n_labels if n_labels is not None else int(cols.max(initial=-1)) + 1,
    )
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)


def format_filter(matrix: sp.csr_matrix) -> Iterator[str]:
    """The lines of a filter file for ``matrix``, ordered by row, then label."""
    csr = sp.csr_matrix(matrix, copy=True)
    csr.sort_indices()
    coo = csr.tocoo()
    for row, label in zip(coo.row.tolist(), coo.col.tolist(), strict=True):
        yield f"{row} {label}"


FILTER_FILES = {
    "train": ("filter_labels_train.txt", "trn_filter_labels.txt"),
    "test": ("filter_labels_test.txt", "tst_filter_labels.txt"),
}


def read_filters(
    folder: Path, sizes: Mapping[str, int | None], n_labels: int | None, log: ProblemLog
) -> dict[str, sp.csr_matrix]:
    """The filter matrices of ``folder`` by split (absent if the split has no filter file).

    ``sizes`` holds the number of documents of each split the folder has (None if unknown).
    """
    found = {}
    for split, names in FILTER_FILES.items():
        path = pick_file(folder, names, log)
        if path is None:
            continue
        if split not in sizes:
            log.add(path, None, f"a filter for the {split} split, but the folder has no {split} split")
            continue
        found[split] = read_filter(path, sizes[split], n_labels, log)
    return found
