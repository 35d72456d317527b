"""The raw layout of the Extreme Classification Repository's LF-* datasets (read only).

``trn.json.gz``, ``tst.json.gz`` (optional): one document per line,
``{"uid": "B0001", "title": "...", "content": "...", "target_ind": [3, 7], "target_rel": [1.0, 1.0]}``;
``lbl.json.gz``: one label per line, ``{"uid": ..., "title": ..., "content": ...}``; filter files
(see :mod:`xdex.data.filters`). The files may also be plain (``.json``). A document's or
label's text is its title, or with ``text="title+content"`` its title and content joined by a
space; a label's content is also kept as its description. ``target_rel`` (optional) gives the
relevance of each label in ``target_ind``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import ProblemLog
from xdex.data.filters import read_filters
from xdex.data.folders import pick_file
from xdex.data.ids import check_ids
from xdex.data.jsonrows import Fields, read_json_rows
from xdex.data.sparse import Rows, to_csr

TEXT_CHOICES = ("title", "title+content")
STEMS = {"train": "trn", "test": "tst", "labels": "lbl"}


def file_names(stem: str) -> tuple[str, str]:
    """The accepted names of one file: gzip-compressed and plain."""
    return f"{stem}.json.gz", f"{stem}.json"


def read(folder: Path, log: ProblemLog, text: str = "title") -> Dataset | None:
    """The dataset in ``folder`` with texts chosen by ``text`` (one of TEXT_CHOICES), or None after
    reporting its problems to ``log``."""
    paths = {name: pick_file(folder, file_names(stem), log) for name, stem in STEMS.items()}
    for name in ("train", "labels"):
        if paths[name] is None:
            log.add(folder, None, f"missing {STEMS[name]}.json.gz (or {STEMS[name]}.json)")
    labels = _read_labels(paths["labels"], text, log) if paths["labels"] else None
    n_labels = len(labels) if labels is not None else None
    splits = {
        name: _read_split(path, text, n_labels, log) for name in ("train", "test") if (path := paths[name]) is not None
    }
    filters = read_filters(folder, {name: len(split) for name, split in splits.items()}, n_labels, log)
    if log or labels is None:
        return None
    splits = {name: replace(split, filter=filters.get(name)) for name, split in splits.items()}
    return Dataset(folder.name, splits["train"], labels, splits.get("test"))


def _text(fields: Fields, text: str) -> tuple[str | None, str | None, str | None]:
    """(title, text, content) of a row; the text is the title, or the title and content joined by a space."""
    title = fields.string("title")
    content = fields.string("content", required=False)
    if title is None or text == "title" or not content:
        return title, title, content
    return title, f"{title} {content}", content


def _read_labels(path: Path, text: str, log: ProblemLog) -> Catalogue:
    ids, texts, descs = [], [], []
    for number, row in enumerate(read_json_rows(path, log), 1):
        key = label_text = desc = None
        if row is not None:
            fields = Fields(row, path, number, log)
            key = fields.key("uid")
            title, label_text, desc = _text(fields, text)
            if title is not None and not title.strip():
                log.add(path, number, "the label has no title")
        ids.append(str(number - 1) if key is None else key)
        texts.append(label_text or "")
        descs.append(desc)
    check_ids(ids, path, log, "uid")
    has_descs = any(d is not None for d in descs)
    return Catalogue(ids, texts, [d or "" for d in descs] if has_descs else None)


def _read_split(path: Path, text: str, n_labels: int | None, log: ProblemLog) -> Split:
    ids, texts, labels, relevances = [], [], [], []
    for number, row in enumerate(read_json_rows(path, log), 1):
        key = doc_text = targets = rel = None
        if row is not None:
            fields = Fields(row, path, number, log)
            key = fields.key("uid")
            _, doc_text, _ = _text(fields, text)
            targets = fields.ids("target_ind")
            if targets is not None:
                rel = fields.numbers("target_rel", len(targets))
        ids.append(str(number - 1) if key is None else key)
        texts.append(doc_text or "")
        labels.append(targets or [])
        relevances.append(rel if rel is not None else [1.0] * len(labels[-1]))
    check_ids(ids, path, log, "uid")
    return Split(ids, texts, to_csr(Rows.from_lists(labels, relevances), n_labels, path, 1, log, "label"))
