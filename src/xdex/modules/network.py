"""The protocol every network follows, so the layers above treat all of them alike.

A network maps texts to search vectors: ``query_vectors`` for queries, ``label_vectors`` for the trained labels
(what the index holds) and ``new_label_vectors`` for labels added by their texts after training, in its current
``search`` mode (one of ``search_modes``). ``rank`` gives each text its top-k labels: by default a search of the
index merged with an exact search of the added labels' vectors; a network that re-scores candidates (OAK)
overrides it. ``save`` / ``load`` write and read the network; ``save_heads`` writes what sits beside the encoder,
and ``model_subfolders`` names sub-folders that are model directories of their own (OAK's linker).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from xdex.encoders.base import Encoder
from xdex.index.base import Index
from xdex.index.kernels import candidate_products
from xdex.index.retrieval import retrieve, with_added
from xdex.metrics.ranking import Ranking
from xdex.text.tokens import TokenizedTexts


class Network(nn.Module):
    """Base of every network (module docstring); subclasses implement the vector methods."""

    encoder: Encoder
    search: str
    kind: str = "network"  # the registered type (xdex.modules.registry), recorded in heads.json
    model_subfolders: tuple[str, ...] = ()  # sub-folders that are model directories of their own

    def parts(self) -> dict[str, Any]:
        """The model directories of ``model_subfolders`` the network holds, by sub-folder (what :meth:`load` is
        handed as ``parts``)."""
        return {}

    @property
    def search_modes(self) -> tuple[str, ...]:
        """The search modes this network supports (a subclass sets or computes them)."""
        raise NotImplementedError

    def query_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        raise NotImplementedError

    def label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        raise NotImplementedError

    def new_label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        raise NotImplementedError

    def text_vectors(self, texts: Sequence[str], batch_size: int = 512) -> torch.Tensor:
        """Query vectors of raw texts."""
        return self.query_vectors(self.encoder.tokenize(list(texts)), batch_size)

    def rank(self, texts: Sequence[str], index: Index, k: int, batch_size: int = 512,
             added: np.ndarray | None = None) -> Ranking:
        """Top-``k`` labels of each text, best first: the trained labels from ``index``, and the labels added
        after training (their vectors ``added``, rows after the trained ones) searched exactly."""
        queries = self.text_vectors(texts, batch_size).numpy()
        ranking = retrieve(queries, index, k)
        if added is None:
            return ranking
        return with_added(ranking, queries, added, len(index), k)

    def head_scores(self, queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray | None:
        """Where the search score sums two heads, each head's share of it: ``[n, C, 2]`` (the label-embedding
        head, the classifier head) for query vectors ``queries`` ``[n, d]`` and their candidate labels ``ids``
        ``[n, C]`` with search vectors ``vectors`` ``[n, C, d]``; None for a network with one head. The ranking
        stage weighs the heads itself (``xdex.ranking.fusion``)."""
        return None

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> Network:
        """Read a network written by ``save``; ``parts``: the loaded model directories of ``model_subfolders``."""
        raise NotImplementedError

    def save_heads(self, folder: str | Path) -> None:
        """Write what the network has beside its encoder (nothing, unless a subclass has heads)."""


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """``F.normalize(x, dim=-1)``, the same bits, through ``torch.linalg.vector_norm`` directly: ``F.normalize``
    reaches it through ``torch.norm`` (deprecated), whose Python checks made a served text's embedding about 10 µs
    slower (docs/benchmarks.md, "Prediction at 10^5 and 10^6 labels")."""
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-12)


def table_scores(table: torch.Tensor, queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Inner products of ``queries`` ``[n, d]`` with rows ``ids`` ``[n, C]`` of a stored label table ``[L, d]``; a
    row past the table (a label added after training) is scored with its search vector from ``vectors``
    ``[n, C, d]``."""
    stored = table.detach().float().cpu().numpy()
    known = ids < len(stored)
    if known.all():  # no added label among them: the stored rows alone, read in place by a compiled loop
        return candidate_products(np.ascontiguousarray(stored), np.ascontiguousarray(queries, np.float32),
                                  np.ascontiguousarray(ids, np.int64))
    rows = np.where(known[..., None], stored[np.where(known, ids, 0)], vectors)
    return np.einsum("ncd,nd->nc", rows, queries)
