"""Nearest-neighbour indexes: exact (chunked brute force) and approximate (HNSW)."""

from xdex.index.base import METRICS, Index, Metric
from xdex.index.exact import ExactIndex
from xdex.index.factory import INDEX_KINDS, build_index, load_index
from xdex.index.hnsw import HNSWIndex
from xdex.index.recall import recall_at_k

__all__ = [
    "METRICS",
    "INDEX_KINDS",
    "Index",
    "Metric",
    "ExactIndex",
    "HNSWIndex",
    "build_index",
    "load_index",
    "recall_at_k",
]
