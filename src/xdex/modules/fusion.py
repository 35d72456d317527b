"""A frozen encoder with per-label classifiers and label embeddings fused at search time (DEXA inference).

DEXA ranks labels by the classifier score w_lᵀE(x) combined with the label-similarity score
E(z_l)ᵀE(x) (Sec. 4, "Inference Pipeline"). Both are inner products with the same query vector
N(E(x)), so the combination α·w_lᵀx + (1 − α)·E(z_l)ᵀx is one inner product with the fused label
vector v_l = α·w_l + (1 − α)·E(z_l), and a single index serves it. Search modes: ``"fused"`` (v_l),
``"de"`` (E(z_l) alone) and ``"clf"`` (w_l alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch

from xdex.encoders.base import Encoder
from xdex.encoders.factory import load_encoder
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.heads_storage import HEADS_CONFIG, HEADS_WEIGHTS, read_heads, write_heads
from xdex.modules.network import table_scores
from xdex.modules.registry import register_network
from xdex.text.tokens import TokenizedTexts

FusionMode = Literal["fused", "de", "clf"]
TABLES = ("label_embeddings", "classifiers")


@register_network("fusion")
class ClassifierFusionNet(DualEncoder):
    """Encoder E with stored label embeddings Z = [E(z_l)] and classifiers W, fused with weight ``alpha``.

    Queries are embedded as by the :class:`DualEncoder` it extends, N(E(x)); only the label side differs.
    """

    search_modes = ("fused", "de", "clf")
    label_embeddings: torch.Tensor
    classifiers: torch.Tensor

    def __init__(
        self,
        encoder: Encoder,
        label_embeddings: torch.Tensor,
        classifiers: torch.Tensor,
        alpha: float,
        search: FusionMode = "fused",
    ):
        super().__init__(encoder)
        z = torch.as_tensor(label_embeddings).detach().float()
        w = torch.as_tensor(classifiers).detach().float()
        if z.ndim != 2 or z.shape != w.shape or z.shape[1] != encoder.dim:
            raise ValueError(f"label embeddings {tuple(z.shape)} and classifiers {tuple(w.shape)} must both be "
                             f"[L, {encoder.dim}] for a {encoder.dim}-dimensional encoder")
        self.register_buffer("label_embeddings", z.clone())
        self.register_buffer("classifiers", w.clone())
        self.alpha = alpha  # validated by the setter
        self.search = search  # validated by the setter

    @property
    def n_labels(self) -> int:
        return self.label_embeddings.shape[0]

    @property
    def alpha(self) -> float:
        """α, the classifiers' share of the fused score."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"the fusion weight alpha must be in [0, 1], got {value}")
        self._alpha = float(value)

    @property
    def search(self) -> str:
        return self._search

    @search.setter
    def search(self, mode: str) -> None:
        if mode not in self.search_modes:
            raise ValueError(f"search mode must be one of {', '.join(self.search_modes)}, got {mode!r}")
        self._search = mode

    # -- search vectors (no graph) ----------------------------------------------------------------
    @torch.no_grad()
    def label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors (row l = label l): α·w_l + (1 − α)·E(z_l), E(z_l) or w_l by mode.

        The label side is stored, so ``tokens`` (the label texts) only have to match it in number.
        """
        if len(tokens) != self.n_labels:
            raise ValueError(f"{len(tokens)} label texts for {self.n_labels} stored labels")
        z, w = self.label_embeddings.float().cpu(), self.classifiers.float().cpu()
        if self.search == "de":
            return z.clone()
        if self.search == "clf":
            return w.clone()
        return self.alpha * w + (1.0 - self.alpha) * z

    def head_scores(self, queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray | None:
        """In ``"fused"`` mode the score is α·w_lᵀx + (1 − α)·E(z_l)ᵀx: the shares E(z_l)ᵀx and w_lᵀx,
        unweighted (:meth:`Network.head_scores`); a label added after training has one vector for both."""
        if self.search != "fused":
            return None
        return np.stack([table_scores(self.label_embeddings, queries, ids, vectors),
                         table_scores(self.classifiers, queries, ids, vectors)], axis=-1)

    def new_label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors of labels added after training, from their texts alone (zero-shot): N(E(z))
        in every mode. DEXA starts a classifier at its label's augmented embedding ẑ = N(E(z) + a_{C(l)})
        (Module II); a new label belongs to no cluster, so it has no auxiliary vector, and its classifier is
        that initial value, w = N(E(z)), which is also its label embedding: the fused α·w + (1 − α)·N(E(z)),
        the embedding and the classifier are one vector."""
        return self.embed(tokens, batch_size)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Write ``encoder/``, ``heads.json`` and ``heads.safetensors`` into ``folder``."""
        self.encoder.save(Path(folder) / "encoder")
        self.save_heads(folder)

    def save_heads(self, folder: str | Path) -> None:
        """Write ``heads.safetensors`` (Z and W) and ``heads.json`` (type, α, search mode) into ``folder``."""
        write_heads(folder, self.kind, {name: getattr(self, name).float() for name in TABLES},
                    {"alpha": self.alpha, "search": self.search, "n_labels": self.n_labels, "dim": self.dim})

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> ClassifierFusionNet:
        """Read a network written by :meth:`save`."""
        folder = Path(folder)
        config_path, weights_path = folder / HEADS_CONFIG, folder / HEADS_WEIGHTS
        config, tables = read_heads(folder, cls.kind)
        missing = [name for name in TABLES if name not in tables]
        if missing:
            raise ValueError(f"{weights_path}: missing table(s) {', '.join(missing)}")
        try:
            expected = (int(config["n_labels"]), int(config["dim"]))
            alpha = float(config["alpha"])
            search = cast(FusionMode, str(config["search"]))  # checked by the search setter
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{config_path}: missing or malformed setting ({e})") from None
        for name in TABLES:
            if tuple(tables[name].shape) != expected:
                raise ValueError(f"{weights_path}: table {name} has shape {tuple(tables[name].shape)}, "
                                 f"{config_path} says {expected}")
        encoder = load_encoder(folder / "encoder")
        try:
            return cls(encoder, tables["label_embeddings"], tables["classifiers"], alpha, search)
        except ValueError as e:
            raise ValueError(f"{folder}: the saved fusion heads are inconsistent ({e})") from None

