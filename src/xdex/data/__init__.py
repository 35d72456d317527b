"""Datasets: formats, validation, statistics, the bundled demo dataset.

``load(source)`` reads a dataset folder in any supported layout (or the bundled dataset by
name, "demo"), ``validate(source)`` lists every problem of a folder, ``save(dataset, folder)``
writes one, ``compute_stats(dataset)`` describes one. docs/data-formats.md describes the layouts.
"""

from xdex.data.bundled import BUNDLED, resolve_source
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import DataFormatError, Problem, ProblemLog
from xdex.data.layouts import LAYOUTS, WRITABLE, detect_layout, load, save, validate
from xdex.data.stats import compute_stats, format_table, rounded

__all__ = [
    "BUNDLED",
    "LAYOUTS",
    "WRITABLE",
    "Catalogue",
    "DataFormatError",
    "Dataset",
    "Problem",
    "ProblemLog",
    "Split",
    "compute_stats",
    "detect_layout",
    "format_table",
    "load",
    "resolve_source",
    "rounded",
    "save",
    "validate",
]
