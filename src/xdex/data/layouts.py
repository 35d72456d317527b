"""Dataset folders on disk: layout detection, loading, validation and saving.

Loading and validation are one code path: the layout's reader records every problem it
finds in a :class:`ProblemLog`; :func:`validate` returns them, :func:`load` raises one
:class:`DataFormatError` listing them, and returns a dataset only when there are none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from xdex.data import bow, jsonl, npz, xc_lf, xc_raw
from xdex.data.bundled import resolve_source
from xdex.data.dataset import Dataset
from xdex.data.errors import Problem, ProblemLog
from xdex.data.folders import write_files

logger = logging.getLogger(__name__)

LAYOUTS = ("jsonl", "xc-lf", "xc-raw", "npz", "bow")
WRITABLE = ("jsonl", "xc-raw", "npz")
MARKERS = {
    "jsonl": jsonl.file_names("train"),
    "xc-lf": xc_lf.file_names("trn"),
    "xc-raw": ("trn_X.txt",),
    "npz": (npz.matrix_name("trn"),),
    "bow": ("train.txt",),
}
"""A folder is in a layout when it holds one of the layout's marker files (its training file)."""


def detect_layout(folder: Path, log: ProblemLog) -> str | None:
    """The layout of ``folder`` from its marker files; None (and a problem) if there is none or several."""
    if not folder.exists():
        log.add(folder, None, "no such folder")
        return None
    if not folder.is_dir():
        log.add(folder, None, "not a folder; a dataset is a folder of files")
        return None
    found = {layout: [n for n in names if (folder / n).is_file()] for layout, names in MARKERS.items()}
    found = {layout: names for layout, names in found.items() if names}
    if len(found) == 1:
        return next(iter(found))
    if not found:
        looked_for = "; ".join(f"{' or '.join(names)} ({layout})" for layout, names in MARKERS.items())
        log.add(folder, None, f"no dataset files found; looked for {looked_for}")
    else:
        seen = "; ".join(f"{', '.join(names)} ({layout})" for layout, names in found.items())
        log.add(folder, None, f"files of several layouts: {seen}; choose one with the layout option")
    return None


def _check_choice(name: str, value: str, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not '{value}'")


def _read(source: str | Path, layout: str | None, text: str, log: ProblemLog) -> Dataset | None:
    """The one code path of :func:`load` and :func:`validate`."""
    if layout is not None:
        _check_choice("layout", layout, LAYOUTS)
    _check_choice("text", text, xc_lf.TEXT_CHOICES)
    folder = resolve_source(source)
    if layout is None:
        layout = detect_layout(folder, log)
    elif not folder.is_dir():
        log.add(folder, None, "no such folder")
        layout = None
    if layout is None:
        return None
    readers: dict[str, Callable[[Path, ProblemLog], Dataset | None]] = {
        "jsonl": jsonl.read,
        "xc-lf": partial(xc_lf.read, text=text),
        "xc-raw": xc_raw.read,
        "npz": npz.read,
        "bow": bow.read,
    }
    dataset = readers[layout](folder, log)
    if dataset is not None:
        dataset.meta.update(layout=layout, path=str(folder), text=text)
    return dataset


def load(source: str | Path, layout: str | None = None, text: str = "title") -> Dataset:
    """Load a dataset folder (or a bundled dataset by name, e.g. "demo").

    ``layout`` is detected from the folder's files unless given ("jsonl", "xc-lf", "xc-raw",
    "npz", "bow"); ``text`` ("title" or "title+content") chooses the texts of the xc-lf layout.
    Raises :class:`DataFormatError` naming the problems (file:line: message) if there are any.
    """
    start = time.perf_counter()
    log = ProblemLog()
    dataset = _read(source, layout, text, log)
    log.raise_if_any()
    assert dataset is not None
    test = len(dataset.test) if dataset.test is not None else 0
    logger.info(
        "loaded %s (%s): %d train, %d test documents, %d labels in %.2f s",
        dataset.name,
        dataset.meta["layout"],
        len(dataset.train),
        test,
        dataset.n_labels,
        time.perf_counter() - start,
    )
    return dataset


def validate(source: str | Path, layout: str | None = None, text: str = "title") -> list[Problem]:
    """Every problem of a dataset folder (empty if it loads), as :func:`load` would find them."""
    log = ProblemLog()
    _read(source, layout, text, log)
    return log.ordered()


def save(
    dataset: Dataset, folder: str | Path, layout: str = "jsonl", overwrite: bool = False, compress: bool = False
) -> None:
    """Write ``dataset`` into ``folder`` in the "jsonl", "xc-raw" or "npz" layout, each file atomically.

    Existing files of the layout are replaced only with ``overwrite`` (and then those the
    dataset does not need are removed); ``compress`` gzips the jsonl files. Raises
    ``FileExistsError`` or, for a dataset the layout cannot hold, ``ValueError``.
    """
    _check_choice("layout", layout, WRITABLE)
    for name, split in dataset.splits().items():
        if len(split) == 0:
            raise ValueError(f"the {name} split has no documents")
    if dataset.n_labels == 0:
        raise ValueError("the dataset has no labels")
    if dataset.akp_items is not None and len(dataset.akp_items) == 0:
        raise ValueError("the dataset has an empty list of auxiliary items")
    files: Mapping[str, Iterable[str] | bytes]
    if layout == "jsonl":
        files, owned = jsonl.files(dataset, compress), jsonl.owned_files()
    elif compress:
        raise ValueError(f"compress applies to jsonl only; the {layout} layout is written uncompressed")
    elif layout == "xc-raw":
        files, owned = xc_raw.files(dataset), xc_raw.owned_files()
    else:
        files, owned = npz.files(dataset), npz.owned_files()
    folder = Path(folder)
    write_files(folder, files, owned, overwrite)
    logger.info("wrote %s (%s) to %s", dataset.name, layout, folder)
