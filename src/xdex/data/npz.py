"""The layout of PECOS and DEXML: texts one per line, label matrices as ``scipy.sparse.save_npz`` files.

``Y.trn.npz``, ``Y.tst.npz`` (optional): the ``N x L`` label matrix of a split, one row per text line,
written by ``scipy.sparse.save_npz`` (csr, csc or coo); ``X.trn.txt``, ``X.tst.txt`` (PECOS; also
spelled ``trn_X.txt`` or ``raw/trn_X.txt``, DEXML): one document text per line; ``output-items.txt``
(PECOS; also ``Y.txt``, ``lbl_X.txt`` or ``raw/Y.txt``, DEXML): one label text per line. Optional, as
in the xc-raw layout: ids one per line (``trn_ids.txt``, ``tst_ids.txt``, ``lbl_ids.txt``), label
descriptions (``lbl_desc.txt``) and filter files (see :mod:`xdex.data.filters`). Other files of
those toolkits (``X.trn.npz``, TF-IDF features) are not read.

An ``.npz`` file is a zip of numpy arrays: it is opened with ``allow_pickle=False`` (an object array
is refused, nothing in it is executed) and checked array by array before any matrix is built, so a
damaged file is a problem naming it, never a traceback. Entries are relevances, as the ``col:val``
values of the xc-raw layout: finite and positive, each (row, label) at most once (scipy keeps explicit
zeros and repeated coo entries; both are problems here).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import UNREADABLE_NPZ, ProblemLog
from xdex.data.filters import FILTER_FILES, format_filter, read_filters
from xdex.data.folders import pick_file
from xdex.data.sparse import Rows, to_csr
from xdex.data.textfile import read_lines
from xdex.data.xc_raw import extension_files, one_per_line, read_catalogue, read_ids

SPLITS = {"train": "trn", "test": "tst"}
LABEL_TEXTS = ("output-items.txt", "Y.txt", "lbl_X.txt", "raw/Y.txt")
FORMATS = ("csr", "csc", "coo")
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members; an empty zip


def matrix_name(stem: str) -> str:
    """The label matrix of a split: ``Y.trn.npz``."""
    return f"Y.{stem}.npz"


def text_names(stem: str) -> tuple[str, ...]:
    """The accepted names of a split's texts: PECOS's, then DEXML's."""
    return f"X.{stem}.txt", f"{stem}_X.txt", f"raw/{stem}_X.txt"


def owned_files() -> list[str]:
    """Every file name this layout may use."""
    names = [*LABEL_TEXTS, "lbl_ids.txt", "lbl_desc.txt"]
    for stem in SPLITS.values():
        names += [*text_names(stem), matrix_name(stem), f"{stem}_ids.txt"]
    return names + [name for names_ in FILTER_FILES.values() for name in names_]


def read(folder: Path, log: ProblemLog) -> Dataset | None:
    """The dataset in ``folder``, or None after reporting its problems to ``log``."""
    labels = read_catalogue(folder, LABEL_TEXTS, "lbl", "label", log)
    if labels is None:
        log.add(folder, None, f"missing {LABEL_TEXTS[0]} (or {', '.join(LABEL_TEXTS[1:])}), the label texts")
    labels_file = pick_file(folder, LABEL_TEXTS, ProblemLog())
    splits = {}
    for name, stem in SPLITS.items():
        texts_path = pick_file(folder, text_names(stem), log)
        matrix_path = folder / matrix_name(stem)
        if name == "test" and texts_path is None and not matrix_path.is_file():
            continue
        if texts_path is None:
            first, *others = text_names(stem)
            log.add(folder, None, f"missing {first} (or {', '.join(others)}), the {name} texts")
        if not matrix_path.is_file():
            log.add(folder, None, f"missing {matrix_path.name}, the labels of the {name} texts")
        splits[name] = _read_split(folder, stem, texts_path, matrix_path, labels, labels_file, log)
    sizes = {name: len(split[0]) if split[0] is not None else None for name, split in splits.items()}
    filters = read_filters(folder, sizes, len(labels) if labels is not None else None, log)
    if log or labels is None:
        return None
    made = {}
    for name, (texts, ids, matrix) in splits.items():
        assert texts is not None and ids is not None and matrix is not None  # else a problem was reported
        made[name] = Split(ids, texts, matrix, filter=filters.get(name))
    return Dataset(folder.name, made["train"], labels, made.get("test"))


def _read_split(
    folder: Path, stem: str, texts_path: Path | None, matrix_path: Path, labels: Catalogue | None,
    labels_file: Path | None, log: ProblemLog,
) -> tuple[list[str] | None, list[str] | None, sp.csr_matrix | None]:
    """(texts, ids, label matrix) of a split; an item is None when its file is missing or broken."""
    texts = ids = None
    if texts_path is not None:
        texts = read_lines(texts_path, log)
        ids = read_ids(folder / f"{stem}_ids.txt", len(texts), texts_path, log)
    matrix = None
    if matrix_path.is_file():
        rows_from = (_name(texts_path, folder), len(texts)) if texts_path is not None and texts is not None else None
        cols_from = (_name(labels_file, folder), len(labels)) if labels_file is not None and labels is not None \
            else None
        matrix = read_matrix(matrix_path, rows_from, cols_from, log)
    return texts, ids, matrix


def _name(path: Path, folder: Path) -> str:
    """``path`` as the messages name it: relative to the dataset folder (``raw/trn_X.txt``)."""
    return path.relative_to(folder).as_posix()


def read_matrix(
    path: Path, rows_from: tuple[str, int] | None, cols_from: tuple[str, int] | None, log: ProblemLog
) -> sp.csr_matrix | None:
    """The label matrix in ``path`` as CSR, or None after reporting why it is not one.

    ``rows_from`` (file name, count) is the file whose lines the rows stand for, ``cols_from`` the file of
    the labels the columns stand for; either may be None when that file is missing (reported elsewhere).
    A problem with an entry is reported at the 1-based row (the line of the text it belongs to) and names
    the 0-based matrix row.
    """
    arrays = _load_arrays(path, log)
    if arrays is None:
        return None
    entries = _entries(arrays, path, log)
    if entries is None:
        return None
    (n_rows, n_cols), row_of, cols, values = entries
    for axis, size, source, what in (("rows", n_rows, rows_from, "lines"), ("columns", n_cols, cols_from, "labels")):
        if source is not None and size != source[1]:
            log.add(path, None, f"the matrix has {size} {axis}, but {source[0]} has {source[1]} {what}")
    rows_kept = rows_from[1] if rows_from is not None else n_rows
    cols_kept = cols_from[1] if cols_from is not None else n_cols
    inside = row_of < rows_kept  # rows beyond the texts were reported above (the shape)
    order = np.argsort(row_of[inside], kind="stable")
    row_of, cols, values = row_of[inside][order], cols[inside][order], values[inside][order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row_of, minlength=rows_kept))]).astype(np.int64)
    entry_log = ProblemLog(max_per_file=log.max_per_file)
    matrix = to_csr(Rows(indptr, cols, values), cols_kept, path, 1, entry_log, "label")
    for problem in entry_log.problems:
        row = f"matrix row {problem.line - 1}: " if problem.line is not None else ""
        log.add(path, problem.line, row + problem.message)
    return matrix


def _load_arrays(path: Path, log: ProblemLog) -> dict[str, np.ndarray] | None:
    """The arrays of the ``.npz`` file ``path``, loaded without pickle; None (and a problem) if it is not one."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        log.add(path, None, "the file is empty")
        return None
    if head not in ZIP_MAGIC:
        log.add(path, None, "not a .npz file (a zip of numpy arrays, as scipy.sparse.save_npz writes)")
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except UNREADABLE_NPZ as e:
        log.add(path, None, f"cannot be read as a .npz file ({e})")
        return None
    others = [name for name, value in arrays.items() if not isinstance(value, np.ndarray)]
    if others:  # numpy hands back the raw bytes of a zip member that is not a .npy array
        log.add(path, None, f"not a .npz file: {', '.join(others)} in the zip is not a numpy array")
        return None
    return arrays


def _entries(
    arrays: dict[str, np.ndarray], path: Path, log: ProblemLog
) -> tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray] | None:
    """(shape, row, column, value) of every stored entry, in storage order; None (and a problem) if the
    arrays are not a 2-d sparse matrix that ``scipy.sparse.save_npz`` writes in one of FORMATS."""

    def bad(message: str) -> None:
        log.add(path, None, message)

    if "format" not in arrays:
        bad(f"no 'format' array: not a sparse matrix written by scipy.sparse.save_npz (arrays: {', '.join(arrays)})")
        return None
    fmt_array = arrays["format"]
    fmt = fmt_array.item() if fmt_array.ndim == 0 and fmt_array.dtype.kind in "SU" else None
    fmt = fmt.decode("ascii", errors="replace") if isinstance(fmt, bytes) else fmt
    if fmt not in FORMATS:
        bad(f"a sparse matrix in format {fmt!r}; this layout reads {', '.join(FORMATS)}")
        return None
    names = ("data", "indices", "indptr") if fmt in ("csr", "csc") else ("data", "row", "col")
    if fmt == "coo" and "row" not in arrays and "coords" in arrays:
        coords = arrays["coords"]
        if coords.ndim == 2 and len(coords) == 2:
            arrays = {**arrays, "row": coords[0], "col": coords[1]}
    missing = [name for name in ("shape", *names) if name not in arrays]
    if missing:
        bad(f"the {fmt} matrix lacks its {', '.join(missing)} array(s)")
        return None
    shape = arrays["shape"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or (shape < 0).any():
        bad(f"the shape must be two non-negative integers, found {shape.tolist()}")
        return None
    n_rows, n_cols = int(shape[0]), int(shape[1])
    for name in names:
        a = arrays[name]
        kinds = "biuf" if name == "data" else "iu"
        if a.ndim != 1 or a.dtype.kind not in kinds:
            kind = "numbers" if name == "data" else "integers"
            bad(f"the {name} array must be a 1-d array of {kind}, found {a.ndim}-d {a.dtype}")
            return None
    data = arrays["data"].astype(np.float64)
    if fmt == "coo":
        row_of, cols = arrays["row"].astype(np.int64), arrays["col"].astype(np.int64)
        if not len(row_of) == len(cols) == len(data):
            bad(f"row, col and data differ in length ({len(row_of)}, {len(cols)}, {len(data)})")
            return None
    else:
        major, indices = (n_rows if fmt == "csr" else n_cols), arrays["indices"]
        indptr = arrays["indptr"].astype(np.int64)
        counts: np.ndarray = np.diff(indptr)
        if len(indptr) != major + 1 or indptr[0] != 0 or (counts < 0).any() \
                or indptr[-1] != len(indices) or len(indices) != len(data):
            bad(f"damaged {fmt} arrays: indptr must rise from 0 to the {len(indices)} stored entries in "
                f"{major + 1} steps, with as many data values ({len(data)})")
            return None
        major_of = np.repeat(np.arange(major, dtype=np.int64), counts)
        minor = indices.astype(np.int64)
        row_of, cols = (major_of, minor) if fmt == "csr" else (minor, major_of)
    outside = (row_of < 0) | (row_of >= n_rows)
    if outside.any():
        bad(f"{int(outside.sum())} stored entries lie outside the {n_rows} rows of the matrix "
            f"(first: row {int(row_of[outside][0])})")
        return None
    return (n_rows, n_cols), row_of, cols, data


def files(dataset: Dataset) -> dict[str, Iterable[str] | bytes]:
    """The files of ``dataset`` in this layout: name -> lines, or the bytes of a ``.npz`` file (checked
    before anything is written)."""
    if dataset.akp_items is not None:
        raise ValueError("the dataset has auxiliary items, which the npz layout cannot hold; use jsonl or xc-raw")
    out: dict[str, Iterable[str] | bytes] = {}
    for name, split in dataset.splits().items():
        stem = SPLITS[name]
        if split.features is not None:
            raise ValueError(f"the {name} split has bag-of-words features, which the npz layout cannot hold")
        out[f"X.{stem}.txt"] = one_per_line(split.texts, split.ids, f"{name} document", "text", "npz")
        out |= extension_files(stem, split.ids, None, f"{name} document", "npz")
        buffer = io.BytesIO()
        sp.save_npz(buffer, sp.csr_matrix(split.labels))
        out[matrix_name(stem)] = buffer.getvalue()
        if split.filter is not None:
            out[FILTER_FILES[name][0]] = format_filter(split.filter)
    labels = dataset.labels
    out[LABEL_TEXTS[0]] = one_per_line(labels.texts, labels.ids, "label", "text", "npz")
    out |= extension_files("lbl", labels.ids, labels.descs, "label", "npz")
    return out

