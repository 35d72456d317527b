"""The sparse bag-of-words layout of the Extreme Classification Repository (read only).

``train.txt``, ``test.txt`` (optional): a header ``N D L`` (documents, features, labels), then
one line per document, ``l1,l2 f:v f:v ...`` (0-based label ids, then ``feature:value``
tokens; a document without labels starts with a space). Such a dataset carries features
instead of texts: its documents' texts and its labels' texts are empty strings, and its ids
are row numbers. Filter files (see :mod:`xdex.data.filters`) are read as in every layout.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import ProblemLog
from xdex.data.filters import read_filters
from xdex.data.ids import default_ids
from xdex.data.sparse import parse_ids, parse_pairs, to_csr
from xdex.data.textfile import read_lines

FILES = {"train": "train.txt", "test": "test.txt"}


def read(folder: Path, log: ProblemLog) -> Dataset | None:
    """The dataset in ``folder``, or None after reporting its problems to ``log``."""
    if not (folder / FILES["train"]).is_file():
        log.add(folder, None, "missing train.txt")
        return None
    train, n_features, n_labels = _read_split(folder / FILES["train"], None, None, log)
    splits = {"train": train}
    if (folder / FILES["test"]).is_file():
        splits["test"], _, _ = _read_split(folder / FILES["test"], n_features, n_labels, log)
    filters = read_filters(folder, {name: len(split) for name, split in splits.items()}, n_labels, log)
    if log or n_labels is None:
        return None
    splits = {name: replace(split, filter=filters.get(name)) for name, split in splits.items()}
    labels = Catalogue(default_ids(n_labels), [""] * n_labels)
    return Dataset(folder.name, splits["train"], labels, splits.get("test"))


def _read_split(
    path: Path, n_features: int | None, n_labels: int | None, log: ProblemLog
) -> tuple[Split, int | None, int | None]:
    """One file; its feature and label counts must equal ``n_features``, ``n_labels`` unless those are None."""
    lines = read_lines(path, log)
    header, body = (lines[0], lines[1:]) if lines else ("", [])
    fields = header.split()
    if lines and (len(fields) != 3 or not all(f.isdecimal() and f.isascii() for f in fields)):
        log.add(path, 1, f"expected a header 'N D L' of three integers, found '{header}'")
    elif lines:
        n_said, d_said, l_said = map(int, fields)
        if n_said != len(body):
            log.add(path, 1, f"the header says {n_said} documents but {len(body)} lines follow")
        for what, said, known in (("features", d_said, n_features), ("labels", l_said, n_labels)):
            if known is not None and said != known:
                log.add(path, 1, f"the header says {said} {what} but train.txt has {known}")
        n_features = d_said if n_features is None else n_features
        n_labels = l_said if n_labels is None else n_labels
    heads, tails = [], []
    for line in body:
        head, _, tail = line.partition(" ")
        heads.append(head)
        tails.append(tail)
    labels = to_csr(parse_ids(heads, path, 2, log), n_labels, path, 2, log, "label")
    features = to_csr(parse_pairs(tails, path, 2, log), n_features, path, 2, log, "feature", positive=False)
    n = len(body)
    return Split(default_ids(n), [""] * n, labels, features=features), n_features, n_labels
