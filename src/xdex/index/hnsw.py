"""Approximate search with a hierarchical navigable small-world graph (hnswlib)."""

from __future__ import annotations

import operator
import os
from pathlib import Path
from typing import Any

import hnswlib
import numpy as np

from xdex.atomic import atomic_path
from xdex.index.base import Index, Metric
from xdex.index.exact import exact_search
from xdex.index.storage import corrupt, write_meta

GRAPH_NAME = "hnsw.bin"


class HNSWIndex(Index):
    """HNSW graph index (Malkov & Yashunin) on hnswlib's inner-product space.

    ``M`` is the number of links per node, ``ef_construction`` and ``ef_search`` the candidate
    list sizes while building and searching (larger: slower, higher recall). ``ef_search`` and
    ``num_threads`` can be changed at any time. A build is reproducible for a given ``seed``
    with ``num_threads=1``; searches are deterministic for any thread count. An index holding
    no more than ``max(ef_search, k)`` items is searched exhaustively, so its results are exact.
    """

    kind = "hnsw"

    def __init__(
        self,
        dim: int,
        metric: Metric = "ip",
        M: int = 16,
        ef_construction: int = 200,
        ef_search: int = 64,
        num_threads: int = 1,
        seed: int = 0,
    ):
        super().__init__(dim, metric)
        for name, value in (("M", M), ("ef_construction", ef_construction)):
            if operator.index(value) < 2:
                raise ValueError(f"{name} must be at least 2, got {value}")
        self.M = operator.index(M)
        self.ef_construction = operator.index(ef_construction)
        self.ef_search = ef_search
        self.num_threads = num_threads
        self.seed = operator.index(seed)
        self._graph = hnswlib.Index(space="ip", dim=dim)
        self._graph.init_index(max_elements=1024, M=self.M, ef_construction=self.ef_construction, random_seed=self.seed)

    @property
    def ef_search(self) -> int:
        """Candidate list size while searching (at least ``k`` is used)."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        if operator.index(value) < 1:
            raise ValueError(f"ef_search must be positive, got {value}")
        self._ef_search = operator.index(value)

    @property
    def num_threads(self) -> int:
        """Threads for building and searching."""
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        if operator.index(value) < 1:
            raise ValueError(f"num_threads must be positive, got {value}")
        self._num_threads = operator.index(value)

    @property
    def params(self) -> dict[str, Any]:
        return {
            "M": self.M,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
            "num_threads": self.num_threads,
            "seed": self.seed,
        }

    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        x = self._vectors(vectors, "vectors")
        new = self._new_ids(ids, len(x))
        if not len(new):
            return
        needed = len(self) + len(new)
        if needed > self._graph.get_max_elements():
            self._graph.resize_index(max(needed, 2 * self._graph.get_max_elements()))
        self._graph.add_items(x, new, num_threads=self.num_threads)
        self._ids = np.concatenate([self._ids, new])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._vectors(queries, "queries")
        k = self._check_k(k)
        scores, ids = self._padded(len(q), k)
        found = min(k, len(self))
        if not (found and len(q)):
            return scores, ids
        if len(self) <= max(self.ef_search, k):
            stored = np.sort(self._ids)
            vectors = np.ascontiguousarray(self._graph.get_items(stored), dtype=np.float32)
            scores[:, :found], rows = exact_search(vectors, q, found)
            ids[:, :found] = stored[rows]
            return scores, ids
        self._graph.set_ef(max(self.ef_search, found))
        try:
            labels, distances = self._graph.knn_query(q, k=found, num_threads=self.num_threads)
        except RuntimeError as e:
            raise ValueError(f"HNSW search found fewer than {found} items ({e}); raise ef_search or M") from None
        found_scores = (1.0 - distances).astype(np.float32)  # hnswlib's "ip" distance is 1 - <q, x>
        order = np.lexsort((labels, -found_scores), axis=1)  # best first, ties to the lower id
        scores[:, :found] = np.take_along_axis(found_scores, order, axis=1)
        ids[:, :found] = np.take_along_axis(labels.astype(np.int64), order, axis=1)
        return scores, ids

    def save(self, folder: str | os.PathLike[str]) -> None:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        with atomic_path(path / GRAPH_NAME) as tmp:
            self._graph.save_index(str(tmp))
        meta = {"dim": self.dim, "metric": self.metric, "count": len(self), "params": self.params}
        write_meta(path, self.kind, meta, [GRAPH_NAME])

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], verify: bool = True, *, ef_search: int | None = None,
        num_threads: int | None = None,
    ) -> HNSWIndex:
        """Read a saved index; ``ef_search`` and ``num_threads`` override the saved values; ``verify``: check the
        graph file's checksum."""
        overrides = {"ef_search": ef_search, "num_threads": num_threads}
        index, count = cls._from_meta(folder, verify, **{k: v for k, v in overrides.items() if v is not None})
        path = Path(folder) / GRAPH_NAME
        index._graph = hnswlib.Index(space="ip", dim=index.dim)
        try:
            index._graph.load_index(str(path))
        except RuntimeError as e:
            raise corrupt(path, f"not a readable hnswlib index ({e})") from None
        index._ids = np.array(index._graph.get_ids_list(), dtype=np.int64)
        if len(index._ids) != count:
            raise corrupt(path, f"holds {len(index._ids)} items, index.json says {count}")
        return index
