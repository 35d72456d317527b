"""Datasets: formats, validation, statistics, the bundled demo dataset."""

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.data.errors import DataFormatError, Problem, ProblemLog

__all__ = ["Catalogue", "Dataset", "Split", "DataFormatError", "Problem", "ProblemLog"]
