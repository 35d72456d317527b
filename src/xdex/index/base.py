"""The interface every nearest-neighbour index implements.

An index stores vectors under integer ids and answers top-k queries by inner product
(``metric="ip"``, score ``<q, x>``) or cosine similarity (``metric="cosine"``: vectors and
queries are scaled to unit norm, so the score is ``<q, x> / (|q| |x|)``). Results come best
first; rows with fewer than ``k`` items are padded with id ``-1`` and score ``-inf``.
"""

from __future__ import annotations

import operator
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from xdex.index.storage import META_NAME, corrupt, read_meta
from xdex.index.vectors import as_matrix, normalize_rows

Metric = Literal["ip", "cosine"]
METRICS: tuple[str, ...] = ("ip", "cosine")

IndexT = TypeVar("IndexT", bound="Index")


class Index(ABC):
    """A store of ``dim``-dimensional vectors searchable by top-k similarity."""

    kind: ClassVar[str]

    def __init__(self, dim: int, metric: Metric = "ip"):
        dim = operator.index(dim)
        if dim < 1:
            raise ValueError(f"index dimension must be positive, got {dim}")
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
        self._dim = dim
        self._metric: Metric = metric
        self._ids = np.empty(0, dtype=np.int64)

    @property
    def dim(self) -> int:
        """Width of the stored vectors."""
        return self._dim

    @property
    def metric(self) -> Metric:
        """``"ip"`` or ``"cosine"``."""
        return self._metric

    @property
    def params(self) -> dict[str, Any]:
        """Settings beyond ``dim`` and ``metric``, as saved with the index."""
        return {}

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        settings = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}(dim={self.dim}, metric={self.metric!r}{settings}) with {len(self)} items"

    @abstractmethod
    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Store ``vectors`` ``[n, dim]`` under ``ids`` (default: ids after the largest one so far)."""

    @abstractmethod
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` items per query: scores float32 ``[q, k]`` and ids int64 ``[q, k]``, best first."""

    @abstractmethod
    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write the index into ``folder`` (created if needed), each file atomically."""

    @classmethod
    @abstractmethod
    def load(cls: type[IndexT], folder: str | os.PathLike[str], verify: bool = True) -> IndexT:
        """Read an index written by :meth:`save` (``verify``: check its files' checksums)."""

    @classmethod
    def _from_meta(cls: type[IndexT], folder: str | os.PathLike[str], verify: bool = True, **overrides: Any
                   ) -> tuple[IndexT, int]:
        """An empty index with the settings saved in ``folder``, and the number of items saved (``verify``: check
        the files' checksums)."""
        meta = read_meta(folder, cls.kind, verify)
        try:
            count = meta["count"]
            if not isinstance(count, int) or count < 0:
                raise ValueError(f"count {count!r} is not a non-negative integer")
            index = cls(meta["dim"], meta["metric"], **{**meta["params"], **overrides})
        except (KeyError, TypeError, ValueError) as e:
            raise corrupt(os.path.join(folder, META_NAME), f"invalid settings ({type(e).__name__}: {e})") from None
        return index, count

    def _vectors(self, array: object, name: str) -> np.ndarray:
        """Validate an ``[n, dim]`` array and apply the metric's normalisation."""
        x = as_matrix(array, name, self.dim)
        return normalize_rows(x) if self.metric == "cosine" else x

    def _new_ids(self, ids: np.ndarray | None, n: int) -> np.ndarray:
        """Check ids for ``n`` new vectors (non-negative, unique, not yet stored) or make them."""
        if ids is None:
            start = int(self._ids.max()) + 1 if len(self._ids) else 0
            return np.arange(start, start + n, dtype=np.int64)
        raw = np.asarray(ids)
        if raw.shape != (n,):
            raise ValueError(f"ids must have shape ({n},) to match the vectors, got {raw.shape}")
        if n and not np.issubdtype(raw.dtype, np.integer):
            raise ValueError(f"ids must be integers, got dtype {raw.dtype}")
        new = raw.astype(np.int64)
        if n and new.min() < 0:
            raise ValueError(f"ids must be non-negative (-1 marks padding), got {new.min()}")
        unique, counts = np.unique(new, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"id {unique[counts > 1][0]} is given more than once")
        taken = np.isin(new, self._ids)
        if taken.any():
            raise ValueError(f"id {new[taken][0]} is already in the index")
        return new

    @staticmethod
    def _check_k(k: int) -> int:
        k = operator.index(k)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return k

    @staticmethod
    def _padded(num_queries: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Result arrays filled with the padding score ``-inf`` and id ``-1``."""
        return np.full((num_queries, k), -np.inf, dtype=np.float32), np.full((num_queries, k), -1, dtype=np.int64)
