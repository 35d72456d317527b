"""The JSON-lines layout, in which xdex's own datasets come.

``train.jsonl``, ``test.jsonl`` (optional): one document per line,
``{"id": 0, "key": "doc-a", "text": "...", "labels": [3, 7], "aux": [1]}``;
``labels.jsonl`` and ``aux.jsonl`` (optional): one item per line,
``{"id": 0, "key": "label-a", "text": "...", "desc": "..."}``; filter files (see
:mod:`xdex.data.filters`). Any ``.jsonl`` file may be gzip-compressed (``.jsonl.gz``).
"id" (the 0-based row number) and "key" (the stable id, else the row number) are optional but
checked when present, "desc" is optional, "aux" (links to rows of ``aux.jsonl``) is read when
the folder has ``aux.jsonl``, other fields are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import ProblemLog
from xdex.data.filters import FILTER_FILES, format_filter, read_filters
from xdex.data.folders import pick_file
from xdex.data.ids import check_ids
from xdex.data.jsonrows import Fields, read_json_rows
from xdex.data.sparse import Rows, to_csr

STEMS = ("train", "test", "labels", "aux")


def file_names(stem: str) -> tuple[str, str]:
    """The accepted names of one file: plain and gzip-compressed."""
    return f"{stem}.jsonl", f"{stem}.jsonl.gz"


def owned_files() -> list[str]:
    """Every file name this layout may use."""
    return [name for stem in STEMS for name in file_names(stem)] + [n for names in FILTER_FILES.values() for n in names]


def read(folder: Path, log: ProblemLog) -> Dataset | None:
    """The dataset in ``folder``, or None after reporting its problems to ``log``."""
    paths = {stem: pick_file(folder, file_names(stem), log) for stem in STEMS}
    for stem in ("train", "labels"):
        if paths[stem] is None:
            log.add(folder, None, f"missing {stem}.jsonl (or {stem}.jsonl.gz)")
    labels = _read_catalogue(paths["labels"], "label", log) if paths["labels"] else None
    akp_items = _read_catalogue(paths["aux"], "auxiliary item", log) if paths["aux"] else None
    n_labels = len(labels) if labels is not None else None
    n_aux = len(akp_items) if akp_items is not None else None
    splits = {
        name: _read_split(path, n_labels, n_aux, log) for name in ("train", "test") if (path := paths[name]) is not None
    }
    filters = read_filters(folder, {name: len(split) for name, split in splits.items()}, n_labels, log)
    if log or labels is None:
        return None
    splits = {name: replace(split, filter=filters.get(name)) for name, split in splits.items()}
    return Dataset(folder.name, splits["train"], labels, splits.get("test"), akp_items)


def _read_catalogue(path: Path, what: str, log: ProblemLog) -> Catalogue:
    """Labels or auxiliary items: ``{"id", "key", "text", "desc"}`` rows; texts must not be blank."""
    ids, texts, descs = [], [], []
    for number, row in enumerate(read_json_rows(path, log), 1):
        key = text = desc = None
        if row is not None:
            fields = Fields(row, path, number, log)
            fields.row_number("id", number - 1)
            key = fields.key("key")
            text = fields.string("text")
            desc = fields.string("desc", required=False)
            if text is not None and not text.strip():
                log.add(path, number, f"the {what} has no text")
        ids.append(str(number - 1) if key is None else key)
        texts.append(text or "")
        descs.append(desc)
    check_ids(ids, path, log, "key")
    has_descs = any(d is not None for d in descs)
    return Catalogue(ids, texts, [d or "" for d in descs] if has_descs else None)


def _read_split(path: Path, n_labels: int | None, n_aux: int | None, log: ProblemLog) -> Split:
    ids, texts, labels, aux = [], [], [], []
    stray_aux = False
    for number, row in enumerate(read_json_rows(path, log), 1):
        key = text = row_labels = row_aux = None
        if row is not None:
            fields = Fields(row, path, number, log)
            fields.row_number("id", number - 1)
            key = fields.key("key")
            text = fields.string("text")
            row_labels = fields.ids("labels")
            row_aux = fields.ids("aux", required=False)
            if "aux" in row and n_aux is None and not stray_aux:
                log.add(path, number, 'the rows have "aux" links but the folder has no aux.jsonl')
                stray_aux = True
        ids.append(str(number - 1) if key is None else key)
        texts.append(text or "")
        labels.append(row_labels or [])
        aux.append(row_aux or [])
    check_ids(ids, path, log, "key")
    label_matrix = to_csr(Rows.from_lists(labels), n_labels, path, 1, log, "label")
    aux_matrix = to_csr(Rows.from_lists(aux), n_aux, path, 1, log, "auxiliary item") if n_aux is not None else None
    return Split(ids, texts, label_matrix, akp=aux_matrix)


def files(dataset: Dataset, compress: bool = False) -> dict[str, Iterable[str]]:
    """The files of ``dataset`` in this layout: name -> lines (checked before anything is written)."""
    suffix = ".jsonl.gz" if compress else ".jsonl"
    out: dict[str, Iterable[str]] = {}
    for name, split in dataset.splits().items():
        _check_writable(name, split)
        out[name + suffix] = _split_lines(split)
        if split.filter is not None:
            out[FILTER_FILES[name][0]] = format_filter(split.filter)
    out["labels" + suffix] = _catalogue_lines(dataset.labels)
    if dataset.akp_items is not None:
        out["aux" + suffix] = _catalogue_lines(dataset.akp_items)
    return out


def _check_writable(name: str, split: Split) -> None:
    if split.features is not None:
        raise ValueError(f"the {name} split has bag-of-words features, which the jsonl layout cannot hold")
    for what, matrix in (("label", split.labels), ("auxiliary item", split.akp)):
        if matrix is not None and np.any(matrix.data != 1):
            raise ValueError(
                f"the {name} split has {what} relevances other than 1, which the jsonl layout cannot hold; "
                "the xc-raw layout keeps them"
            )


def _row_ids(matrix: sp.csr_matrix, r: int) -> list[int]:
    return matrix.indices[matrix.indptr[r] : matrix.indptr[r + 1]].tolist()


def _split_lines(split: Split) -> Iterator[str]:
    for r, (key, text) in enumerate(zip(split.ids, split.texts, strict=True)):
        row = {"id": r, "key": key, "text": text, "labels": _row_ids(split.labels, r)}
        if split.akp is not None:
            row["aux"] = _row_ids(split.akp, r)
        yield json.dumps(row, ensure_ascii=False)


def _catalogue_lines(catalogue: Catalogue) -> Iterator[str]:
    for r, (key, text) in enumerate(zip(catalogue.ids, catalogue.texts, strict=True)):
        row = {"id": r, "key": key, "text": text}
        if catalogue.descs is not None:
            row["desc"] = catalogue.descs[r]
        yield json.dumps(row, ensure_ascii=False)
