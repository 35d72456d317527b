"""The raw-text layout of the Extreme Classification Repository, with xdex's extensions.

Texts, one per line: ``trn_X.txt``, ``tst_X.txt`` (optional) for documents, ``lbl_X.txt``
(or ``Y.txt``) for labels. Label matrices: ``trn_X_Y.txt``, ``tst_X_Y.txt``, a header line
``rows cols`` then one line of ``col:val`` tokens (0-based) per document, empty for none.
Extensions, all optional: stable ids one per line (``trn_ids.txt``, ``tst_ids.txt``,
``lbl_ids.txt``, ``aux_ids.txt``; else the row number), descriptions one per line
(``lbl_desc.txt``, ``aux_desc.txt``), auxiliary items (``aux_X.txt``) with their links in
``trn_X_aux.txt`` / ``tst_X_aux.txt`` (same format as ``trn_X_Y.txt``), and filter files
(see :mod:`xdex.data.filters`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import scipy.sparse as sp

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import ProblemLog
from xdex.data.filters import FILTER_FILES, format_filter, read_filters
from xdex.data.folders import check_line_count, pick_file
from xdex.data.ids import check_ids, default_ids
from xdex.data.sparse import format_pairs, parse_pairs, to_csr
from xdex.data.textfile import read_lines

SPLITS = {"train": "trn", "test": "tst"}
LABEL_TEXTS = ("lbl_X.txt", "Y.txt")


def owned_files() -> list[str]:
    """Every file name this layout may use."""
    names = [*LABEL_TEXTS, "lbl_ids.txt", "lbl_desc.txt", "aux_X.txt", "aux_ids.txt", "aux_desc.txt"]
    for stem in SPLITS.values():
        names += [f"{stem}_X.txt", f"{stem}_ids.txt", f"{stem}_X_Y.txt", f"{stem}_X_aux.txt"]
    return names + [name for names_ in FILTER_FILES.values() for name in names_]


def read(folder: Path, log: ProblemLog) -> Dataset | None:
    """The dataset in ``folder``, or None after reporting its problems to ``log``."""
    labels = read_catalogue(folder, LABEL_TEXTS, "lbl", "label", log)
    if labels is None:
        log.add(folder, None, "missing lbl_X.txt (or Y.txt), the label texts")
    akp_items = read_catalogue(folder, ("aux_X.txt",), "aux", "auxiliary item", log)
    splits = {}
    for name, stem in SPLITS.items():
        if (folder / f"{stem}_X.txt").is_file():
            splits[name] = _read_split(folder, stem, labels, akp_items, log)
        elif name == "train" or (folder / f"{stem}_X_Y.txt").is_file():
            log.add(folder, None, f"missing {stem}_X.txt, the {name} texts")
    filters = read_filters(folder, {name: len(split) for name, split in splits.items()}, _size(labels), log)
    if log or labels is None:
        return None
    splits = {name: replace(split, filter=filters.get(name)) for name, split in splits.items()}
    return Dataset(folder.name, splits["train"], labels, splits.get("test"), akp_items)


def _size(catalogue: Catalogue | None) -> int | None:
    return len(catalogue) if catalogue is not None else None


def _read_parallel(path: Path, n: int, source: Path, log: ProblemLog) -> list[str] | None:
    """An optional file with one line per line of ``source`` (ids, descriptions); None if absent."""
    if not path.is_file():
        return None
    lines = read_lines(path, log)
    check_line_count(path, len(lines), n, source.name, log)
    return (lines + [""] * n)[:n]


def read_ids(path: Path, n: int, source: Path, log: ProblemLog) -> list[str]:
    """The ids in an optional file with one per line of ``source``; the row numbers if it is absent."""
    ids = _read_parallel(path, n, source, log)
    if ids is None:
        return default_ids(n)
    check_ids(ids, path, log)
    return ids


def read_catalogue(folder: Path, names: Sequence[str], stem: str, what: str, log: ProblemLog) -> Catalogue | None:
    """Items with text from the file of ``folder`` with one of ``names`` (None if there is none), their ids from
    ``{stem}_ids.txt`` and descriptions from ``{stem}_desc.txt`` when present; ``what`` names one in messages."""
    path = pick_file(folder, names, log)
    if path is None:
        return None
    texts = read_lines(path, log)
    for number, text in enumerate(texts, 1):
        if not text.strip():
            log.add(path, number, f"the {what} has no text")
    ids = read_ids(folder / f"{stem}_ids.txt", len(texts), path, log)
    descs = _read_parallel(folder / f"{stem}_desc.txt", len(texts), path, log)
    return Catalogue(ids, texts, descs)


def _read_split(
    folder: Path, stem: str, labels: Catalogue | None, akp_items: Catalogue | None, log: ProblemLog
) -> Split:
    texts_path = folder / f"{stem}_X.txt"
    texts = read_lines(texts_path, log)
    n = len(texts)
    ids = read_ids(folder / f"{stem}_ids.txt", n, texts_path, log)
    label_path = folder / f"{stem}_X_Y.txt"
    if label_path.is_file():
        label_matrix = read_sparse(label_path, n, texts_path.name, _size(labels), log, "label")
    else:
        log.add(folder, None, f"missing {label_path.name}, the labels of {texts_path.name}")
        label_matrix = sp.csr_matrix((n, _size(labels) or 0))
    aux_path = folder / f"{stem}_X_aux.txt"
    aux_matrix = None
    if aux_path.is_file():
        if akp_items is None:
            log.add(aux_path, None, "links to auxiliary items, but the folder has no aux_X.txt")
        aux_matrix = read_sparse(aux_path, n, texts_path.name, _size(akp_items), log, "auxiliary item")
    elif akp_items is not None:
        aux_matrix = sp.csr_matrix((n, len(akp_items)))
    return Split(ids, texts, label_matrix, akp=aux_matrix)


def read_sparse(
    path: Path, n_rows: int, rows_from: str, n_cols: int | None, log: ProblemLog, what: str
) -> sp.csr_matrix:
    """A ``rows cols`` header and ``col:val`` rows: one row per line of the file ``rows_from``
    (``n_rows``), ``n_cols`` columns (None when unknown: then as the header says)."""
    lines = read_lines(path, log)
    header, body = (lines[0], lines[1:]) if lines else ("", [])
    fields = header.split()
    if lines and (len(fields) != 2 or not all(f.isdecimal() and f.isascii() for f in fields)):
        log.add(path, 1, f"expected a header 'rows cols' of two integers, found '{header}'")
    elif lines:
        rows_said, cols_said = map(int, fields)
        if rows_said != len(body):
            log.add(path, 1, f"the header says {rows_said} rows but {len(body)} follow")
        if n_cols is not None and cols_said != n_cols:
            log.add(path, 1, f"the header says {cols_said} columns but there are {n_cols} {what}s")
        n_cols = cols_said if n_cols is None else n_cols
    check_line_count(path, len(body), n_rows, rows_from, log, first_line=2)
    rows = parse_pairs((body + [""] * n_rows)[:n_rows], path, 2, log)
    return to_csr(rows, n_cols, path, 2, log, what)


def files(dataset: Dataset) -> dict[str, Iterable[str]]:
    """The files of ``dataset`` in this layout: name -> lines (checked before anything is written)."""
    out: dict[str, Iterable[str]] = {}
    for name, split in dataset.splits().items():
        stem = SPLITS[name]
        if split.features is not None:
            raise ValueError(f"the {name} split has bag-of-words features, which the xc-raw layout cannot hold")
        out |= _item_files(stem, split.ids, split.texts, None, f"{name} document")
        out[f"{stem}_X_Y.txt"] = _sparse_lines(split.labels)
        if split.akp is not None:
            out[f"{stem}_X_aux.txt"] = _sparse_lines(split.akp)
        if split.filter is not None:
            out[FILTER_FILES[name][0]] = format_filter(split.filter)
    out |= _item_files("lbl", dataset.labels.ids, dataset.labels.texts, dataset.labels.descs, "label")
    if dataset.akp_items is not None:
        aux = dataset.akp_items
        out |= _item_files("aux", aux.ids, aux.texts, aux.descs, "auxiliary item")
    return out


def _item_files(
    stem: str, ids: list[str], texts: list[str], descs: list[str] | None, what: str
) -> dict[str, list[str]]:
    """``{stem}_X.txt`` (texts), ``{stem}_ids.txt`` (unless the ids are the row numbers), ``{stem}_desc.txt``."""
    out = {f"{stem}_X.txt": one_per_line(texts, ids, what, "text")}
    out |= extension_files(stem, ids, descs, what)
    return out


def extension_files(stem: str, ids: list[str], descs: list[str] | None, what: str, layout: str = "xc-raw"
                    ) -> dict[str, list[str]]:
    """``{stem}_ids.txt`` (unless the ids are the row numbers) and ``{stem}_desc.txt`` (when there are descriptions)."""
    out = {}
    if ids != default_ids(len(ids)):
        out[f"{stem}_ids.txt"] = one_per_line(ids, ids, what, "id", layout)
    if descs is not None:
        out[f"{stem}_desc.txt"] = one_per_line(descs, ids, what, "description", layout)
    return out


def one_per_line(values: list[str], ids: list[str], what: str, field: str, layout: str = "xc-raw") -> list[str]:
    """``values`` as the lines of a file, refused (``ValueError``) if one has a line break."""
    for value, key in zip(values, ids, strict=True):
        if "\n" in value or "\r" in value:
            raise ValueError(
                f"the {field} of {what} '{key}' has a line break, which the {layout} layout (one per line) "
                "cannot hold; use the jsonl layout"
            )
    return values


def _sparse_lines(matrix: sp.csr_matrix) -> Iterator[str]:
    yield f"{matrix.shape[0]} {matrix.shape[1]}"
    yield from format_pairs(matrix)
