"""OAK's augmentation block and network (OAK Sec. 4, Eq. 2, Sec. 4.2).

* AK bank 𝒦 ∈ R^{M×D}: one free embedding per auxiliary knowledge piece (AKP), started at the
  encoder's normalised embedding of the AKP's text and trained with sparse gradients (SparseAdam).
* Combiner 𝒞 (Eq. 2): x̂ = ψ(d) = 𝒞(x, {𝒦(a_k)}) with x = N(E(d)). One cross-attention layer whose
  query is the document embedding and whose K + 1 slots are the document itself and its AKPs:

      α = softmax_s(q·k_s / √D)  over the valid slots s ∈ {x, 𝒦(a_1), ..., 𝒦(a_K)},  q = W_q x, k_s = W_k s
      x̂ = N(x + W_o Σ_s α_s W_v s)

  Padded slots (documents have different numbers of AKPs) get exactly zero weight. A document without
  AKPs attends to itself alone, so x̂ is then a learnt function of x; the residual x + … keeps the
  document's own intent, and W_o starts at zero so that training starts from x̂ = x. Pooling
  ``"mean"`` gives every valid slot the same weight (the ablation of OAK Table 7).
* :class:`OakNet`: the trained model. Queries go through the linker R (top-K AKPs of a text), the
  encoder, the bank and the combiner; labels are the frozen stage-2 embeddings y_j = N(E(l_j)) and the
  stage-3 classifiers w_j. Search (Sec. 4.2) takes candidates from the index over N(w_j) queried with x̂
  and scores them by the product of sim(x̂, y_j) and the index score. Both are cosines in [-1, 1]; each
  is mapped to [0, 1] by s ↦ (1 + s)/2 before the product, so the final score grows with either factor
  and two negative cosines never multiply into a high score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from xdex.encoders.base import Encoder
from xdex.encoders.factory import load_encoder
from xdex.index import Index
from xdex.metrics.ranking import PAD, Ranking
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.heads_storage import HEADS_CONFIG, HEADS_WEIGHTS, read_heads, write_heads
from xdex.modules.network import table_scores
from xdex.modules.registry import register_network
from xdex.text.tokens import TokenizedTexts

Pooling = Literal["attention", "mean"]
POOLINGS: tuple[str, ...] = ("attention", "mean")
OAK_SEARCH_MODES: tuple[str, ...] = ("oak", "de", "encoder")
LINKER_DIR = "linker"
TABLES = ("label_embeddings", "classifiers")


def final_score(similarity: torch.Tensor, index_score: torch.Tensor) -> torch.Tensor:
    """Sec. 4.2's final score of a candidate label: the product of sim(x̂, y_j) and the index score x̂·N(w_j),
    each cosine mapped to [0, 1] first: (1 + sim)/2 · (1 + ann)/2 (module docstring)."""
    return (1 + similarity) / 2 * (1 + index_score) / 2


def pad_links(links: sp.csr_matrix, rows: np.ndarray | None = None) -> torch.Tensor:
    """AKP ids of the given rows of an ``N x M`` link matrix as a ``[B, K]`` int64 tensor, ``-1``-padded
    (K = the most links of any of the rows, at least 1)."""
    sub = sp.csr_matrix(links if rows is None else links[np.asarray(rows)])
    counts = np.diff(sub.indptr)
    ids = np.full((sub.shape[0], max(1, int(counts.max(initial=0)))), PAD, dtype=np.int64)
    columns = np.arange(sub.nnz) - np.repeat(sub.indptr[:-1], counts)
    ids[np.repeat(np.arange(sub.shape[0]), counts), columns] = sub.indices
    return torch.from_numpy(ids)


class AKBank(nn.Module):
    """𝒦: a sparse-gradient table of M AKP embeddings; ``forward(ids [B, K])`` gives ``[B, K, D]`` and
    the mask of real (non ``-1``) slots. Only real ids are looked up, so a batch's gradient has rows
    for its own AKPs alone."""

    def __init__(self, init: torch.Tensor):
        super().__init__()
        weights = torch.as_tensor(init).detach().float()
        if weights.ndim != 2 or weights.shape[0] < 1:
            raise ValueError(f"the AK bank needs an [M, D] initial table with M >= 1, got {tuple(weights.shape)}")
        self.table = nn.Embedding.from_pretrained(weights.clone(), freeze=False, sparse=True)

    @property
    def size(self) -> int:
        """M, the number of AKPs."""
        return self.table.num_embeddings

    @property
    def dim(self) -> int:
        return self.table.embedding_dim

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if ids.ndim != 2:
            raise ValueError(f"AKP ids must be a [B, K] tensor, got shape {tuple(ids.shape)}")
        if ids.numel() and int(ids.max()) >= self.size:
            raise ValueError(f"AKP id {int(ids.max())} is outside the bank of {self.size} AKPs")
        mask = ids >= 0
        out = self.table.weight.new_zeros(*ids.shape, self.dim)
        out[mask] = self.table(ids[mask])
        return out, mask


class Combiner(nn.Module):
    """𝒞: one cross-attention layer of the document over [x; AKPs] with pooling (module docstring)."""

    def __init__(self, dim: int, pooling: Pooling = "attention"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.pooling = pooling
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def weights(self, x: torch.Tensor, akps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """α ``[B, K + 1]`` over the slots (document first, then its AKPs); rows sum to 1, padding gets 0."""
        valid = torch.cat([mask.new_ones(len(x), 1), mask], dim=1)
        if self.pooling == "mean":
            return valid.float() / valid.sum(dim=1, keepdim=True)
        slots = torch.cat([x.unsqueeze(1), akps], dim=1)
        logits = (self.query(x).unsqueeze(1) * self.key(slots)).sum(-1) / x.shape[-1] ** 0.5
        return torch.softmax(logits.masked_fill(~valid, float("-inf")), dim=1)

    def forward(self, x: torch.Tensor, akps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x̂ = N(x + W_o Σ_s α_s W_v s)."""
        alpha = self.weights(x, akps, mask)
        slots = torch.cat([x.unsqueeze(1), akps], dim=1)
        pooled = (alpha.unsqueeze(-1) * self.value(slots)).sum(dim=1)
        return F.normalize(x + self.out(pooled), dim=-1)


class Augmentation(nn.Module):
    """The bank and the combiner: ``forward(x [B, D], ids [B, K])`` gives x̂ = ψ(d) (Eq. 2)."""

    def __init__(self, bank_init: torch.Tensor, pooling: Pooling = "attention"):
        super().__init__()
        self.bank = AKBank(bank_init)
        self.combiner = Combiner(self.bank.dim, pooling)

    @property
    def dim(self) -> int:
        return self.bank.dim

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.combiner(x, *self.bank(ids))

    def attention(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The combiner's weights α ``[B, K + 1]`` (document slot first)."""
        return self.combiner.weights(x, *self.bank(ids))

    @torch.no_grad()
    def enrich(self, x: torch.Tensor, ids: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
        """x̂ of documents with embeddings ``x`` ``[N, D]`` and AKP ids ``ids`` ``[N, K]``: eval mode, no
        graph, in row chunks, on the CPU."""
        if len(x) != len(ids):
            raise ValueError(f"{len(x)} documents but AKP ids for {len(ids)}")
        was_training = self.training
        self.eval()
        device = self.bank.table.weight.device
        try:
            parts = [self(x[i : i + batch_size].to(device), ids[i : i + batch_size].to(device)).cpu()
                     for i in range(0, len(x), batch_size)]
        finally:
            self.train(was_training)
        return torch.cat(parts) if parts else x.new_zeros(0, self.dim)


class Linker(Protocol):
    """Linker R: ranks AKPs for texts (any trained xdex model directory whose labels are the AKPs)."""

    def predict(self, texts: list[str], k: int = 10) -> Ranking: ...

    def save(self, folder: str | Path) -> None: ...


def link(linker: Linker, texts: Sequence[str], top_k: int, threshold: float | None = None) -> torch.Tensor:
    """The linker's top-K AKP ids of each text ``[B, K]``, ``-1`` where below ``threshold`` or missing."""
    ranking = linker.predict(list(texts), top_k)
    ids = ranking.indices.copy()
    if threshold is not None:
        ids[ranking.scores < threshold] = PAD
    return torch.from_numpy(ids)


@register_network("oak")
class OakNet(DualEncoder):
    """Encoder E, augmentation ψ, stored label embeddings y_j and classifiers w_j, and the linker R.

    Search modes: ``"oak"`` (x̂ against N(w_j), candidates re-scored by sim(x̂, y_j), Sec. 4.2),
    ``"de"`` (x̂ against y_j: the stage-2 embeddings the paper's ablations use) and ``"encoder"``
    (x = N(E(d)) against y_j: no linker, no augmentation).
    """

    model_subfolders = (LINKER_DIR,)  # the linker is a model directory of its own

    search_modes = OAK_SEARCH_MODES
    label_embeddings: torch.Tensor
    classifiers: torch.Tensor

    def __init__(
        self,
        encoder: Encoder,
        augment: Augmentation,
        label_embeddings: torch.Tensor,
        classifiers: torch.Tensor,
        linker: Linker,
        top_k: int = 3,
        threshold: float | None = None,
        candidates: int = 100,
        search: str = "oak",
    ):
        super().__init__(encoder)
        y = torch.as_tensor(label_embeddings).detach().float()
        w = torch.as_tensor(classifiers).detach().float()
        if y.ndim != 2 or y.shape != w.shape or y.shape[1] != encoder.dim or augment.dim != encoder.dim:
            raise ValueError(f"label embeddings {tuple(y.shape)}, classifiers {tuple(w.shape)} and AK bank "
                             f"[{augment.bank.size}, {augment.dim}] must all be {encoder.dim}-dimensional, "
                             "with one classifier per label")
        if top_k < 1 or candidates < 1:
            raise ValueError(f"top_k and candidates must be positive, got {top_k} and {candidates}")
        self.augment = augment
        self.register_buffer("label_embeddings", y.clone())
        self.register_buffer("classifiers", w.clone())
        self.linker = linker
        self.top_k = int(top_k)
        self.threshold = None if threshold is None else float(threshold)
        self.candidates = int(candidates)
        self.search = search  # validated by the setter

    @property
    def n_labels(self) -> int:
        return self.label_embeddings.shape[0]

    @property
    def search(self) -> str:
        return self._search

    @search.setter
    def search(self, mode: str) -> None:
        if mode not in self.search_modes:
            raise ValueError(f"search mode must be one of {', '.join(self.search_modes)}, got {mode!r}")
        self._search = mode

    def parts(self) -> dict[str, Any]:
        """The linker, a model directory of its own."""
        return {LINKER_DIR: self.linker}

    # -- query side (no graph) ------------------------------------------------------------------
    def text_vectors(
        self, texts: Sequence[str], batch_size: int = 512, links: sp.csr_matrix | None = None
    ) -> torch.Tensor:
        """Query vectors of raw texts for the search mode: x̂ (AKPs from the linker, or the given ``links``
        rows, e.g. a test split's own links for an oracle linker), or x in mode ``"encoder"``."""
        texts = list(texts)
        if links is not None and links.shape[0] != len(texts):
            raise ValueError(f"{len(texts)} texts but {links.shape[0]} rows of AKP links")
        x = self.embed(self.encoder.tokenize(texts), batch_size)
        if self.search == "encoder":
            return x
        ids = link(self.linker, texts, self.top_k, self.threshold) if links is None else pad_links(links)
        return self.augment.enrich(x, ids, batch_size)

    def rank(
        self, texts: Sequence[str], index: Index, k: int, batch_size: int = 512, added: np.ndarray | None = None,
        *, links: sp.csr_matrix | None = None,
    ) -> Ranking:
        """Top-``k`` labels of each text from ``index`` (built over :meth:`label_vectors`), best first; in mode
        ``"oak"`` the index's candidates are re-scored as in the module docstring. ``added``: the vectors
        N(E(l)) of labels added after training (:meth:`new_label_vectors`, rows after the trained labels),
        searched exactly and scored as trained labels are (y = w = N(E(l)) for a label without training)."""
        q = np.ascontiguousarray(self.text_vectors(texts, batch_size, links).numpy(), dtype=np.float32)
        ranking = self._rank_trained(q, index, k, batch_size)
        if added is None or not len(added) or not len(q):
            return ranking
        extra = torch.from_numpy(q) @ torch.from_numpy(np.asarray(added, dtype=np.float32)).T
        if self.search == "oak":
            extra = final_score(extra, extra)
        scores = np.concatenate([ranking.scores, extra.numpy()], axis=1)
        rows = np.concatenate([ranking.indices, np.broadcast_to(self.n_labels + np.arange(len(added)), extra.shape)],
                              axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # trained rows first among equal scores
        return Ranking(np.take_along_axis(rows, order, axis=1), np.take_along_axis(scores, order, axis=1))

    def _rank_trained(self, q: np.ndarray, index: Index, k: int, batch_size: int) -> Ranking:
        """Top-``k`` trained labels of query vectors ``q``: index search, re-scored in mode ``"oak"``."""
        if self.search != "oak":
            return _search(index, q, k)
        found = _search(index, q, max(k, min(self.candidates, self.n_labels)))
        y = self.label_embeddings.float().cpu()
        ids, scores = [], []
        for start in range(0, len(q), batch_size):
            rows = slice(start, start + batch_size)
            cand = torch.from_numpy(found.indices[rows])
            sim = torch.einsum("nd,nsd->ns", torch.from_numpy(q[rows]), y[cand.clamp_min(0)])
            final = final_score(sim, torch.from_numpy(found.scores[rows])).masked_fill(cand < 0, float("-inf"))
            best, order = torch.topk(final, min(k, final.shape[1]), dim=1)
            top = torch.gather(cand, 1, order).masked_fill(torch.isinf(best), PAD)
            ids.append(top.numpy())
            scores.append(best.numpy())
        if not ids:
            return Ranking(np.zeros((0, k), np.int64), np.zeros((0, k), np.float32))
        return _padded(Ranking(np.concatenate(ids), np.concatenate(scores)), k)

    def head_scores(self, queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray | None:
        """In mode ``"oak"`` the two scores :func:`final_score` combines: the label embedding's yᵀx and the
        classifier's N(w)ᵀx (the search vectors); a label added after training has one vector for both
        (:meth:`Network.head_scores`)."""
        if self.search != "oak":
            return None
        return np.stack([table_scores(self.label_embeddings, queries, ids, vectors),
                         np.einsum("ncd,nd->nc", vectors, queries)], axis=-1)

    def query_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Refused: the linker needs the texts themselves (:meth:`text_vectors`)."""
        raise ValueError("an OAK network links raw texts to AKPs: use text_vectors(texts) or rank(texts, ...)")

    def new_label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Vectors of labels added after training, from their texts alone: N(E(l)) in every mode (such a label
        has no refinement, so its classifier is its embedding, w = y)."""
        return self.embed(tokens, batch_size)

    # -- label side --------------------------------------------------------------------------------
    @torch.no_grad()
    def label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors (row j = label j): N(w_j) in mode ``"oak"``, else y_j. The label side
        is stored, so ``tokens`` (the label texts) only have to match it in number."""
        if len(tokens) != self.n_labels:
            raise ValueError(f"{len(tokens)} label texts for {self.n_labels} stored labels")
        if self.search == "oak":
            return F.normalize(self.classifiers.float().cpu(), dim=-1)
        return self.label_embeddings.float().cpu().clone()

    # -- persistence -------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Write ``encoder/``, ``heads.json``, ``heads.safetensors`` and ``linker/`` into ``folder``."""
        self.encoder.save(Path(folder) / "encoder")
        self.save_heads(folder)

    def save_heads(self, folder: str | Path) -> None:
        """Write the bank, combiner, y and w (``heads.safetensors``), the settings (``heads.json``) and the
        linker (``linker/``, a model directory of its own) into ``folder``."""
        tables = {f"augment.{k}": v.float() for k, v in self.augment.state_dict().items()}
        tables.update({name: getattr(self, name).float() for name in TABLES})
        self.linker.save(Path(folder) / LINKER_DIR)
        write_heads(folder, self.kind, tables, {
            "dim": self.dim, "n_labels": self.n_labels, "n_akp": self.augment.bank.size,
            "pooling": self.augment.combiner.pooling, "top_k": self.top_k, "threshold": self.threshold,
            "candidates": self.candidates, "search": self.search,
        })

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> OakNet:
        """Read a network written by :meth:`save`; ``parts["linker"]`` (required) is the model directory
        ``folder/linker`` loaded by the inference layer (a network does not load models)."""
        linker = (parts or {}).get(LINKER_DIR)
        if linker is None:
            raise ValueError(f"{folder}: an OAK network needs its linker; load the model directory instead")
        folder = Path(folder)
        config_path, weights_path = folder / HEADS_CONFIG, folder / HEADS_WEIGHTS
        config, tables = read_heads(folder, cls.kind)
        try:
            dims = (int(config["n_labels"]), int(config["dim"]))
            n_akp = config["n_akp"] if "n_akp" in config else config["n_aux"]  # n_aux: written by xdex 0.1.0
            bank_shape = (int(n_akp), int(config["dim"]))
            top_k, candidates = int(config["top_k"]), int(config["candidates"])
            threshold = None if config["threshold"] is None else float(config["threshold"])
            search = str(config["search"])
            pooling = cast(Pooling, str(config["pooling"]))  # checked by Combiner
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{config_path}: missing or malformed setting ({e})") from None
        shapes = dict.fromkeys(TABLES, dims) | {"augment.bank.table.weight": bank_shape}
        for name, shape in shapes.items():
            if name not in tables or tuple(tables[name].shape) != shape:
                found = tuple(tables[name].shape) if name in tables else "missing"
                raise ValueError(f"{weights_path}: table {name} is {found}, {config_path} says {shape}")
        augment = Augmentation(tables["augment.bank.table.weight"], pooling)
        state = {k.removeprefix("augment."): v for k, v in tables.items() if k.startswith("augment.")}
        try:
            augment.load_state_dict(state)
            return cls(load_encoder(folder / "encoder"), augment, tables["label_embeddings"], tables["classifiers"],
                       linker, top_k=top_k, threshold=threshold, candidates=candidates, search=search)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"{folder}: the saved OAK network is inconsistent ({e})") from None


def _search(index: Index, queries: np.ndarray, k: int) -> Ranking:
    scores, ids = index.search(queries, k)
    return Ranking(ids, scores)


def _padded(ranking: Ranking, k: int) -> Ranking:
    """``ranking`` widened to ``k`` columns with padding (when fewer labels than ``k`` exist)."""
    missing = k - ranking.k
    if missing <= 0:
        return ranking
    n = ranking.n_rows
    return Ranking(np.hstack([ranking.indices, np.full((n, missing), PAD)]),
                   np.hstack([ranking.scores, np.full((n, missing), -np.inf, np.float32)]))
