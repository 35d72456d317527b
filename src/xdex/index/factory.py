"""Building and loading indexes by name, for configuration files."""

from __future__ import annotations

import inspect
import os
from typing import Any

from xdex.index.base import Index, Metric
from xdex.index.exact import ExactIndex
from xdex.index.hnsw import HNSWIndex
from xdex.index.storage import META_NAME, corrupt, read_meta

INDEX_KINDS: dict[str, type[Index]] = {ExactIndex.kind: ExactIndex, HNSWIndex.kind: HNSWIndex}


def build_index(kind: str, dim: int, metric: Metric = "ip", **params: Any) -> Index:
    """An empty index of ``kind`` (``"exact"`` or ``"hnsw"``) with the given settings."""
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(INDEX_KINDS)}")
    cls = INDEX_KINDS[kind]
    accepted = set(inspect.signature(cls).parameters) - {"dim", "metric"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{kind} index has no setting {unknown[0]!r}; settings: {', '.join(sorted(accepted))}")
    return cls(dim, metric, **params)


def load_index(folder: str | os.PathLike[str], verify: bool = True) -> Index:
    """Load a saved index of any kind; ``verify``: check its files' checksums (False: a caller checked them)."""
    kind = read_meta(folder, verify=False).get("kind")  # the kind's own load checks the files
    if kind not in INDEX_KINDS:
        raise corrupt(os.path.join(folder, META_NAME), f"unknown index kind {kind!r}")
    return INDEX_KINDS[kind].load(folder, verify=verify)
