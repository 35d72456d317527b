"""UniDEC's heads on a shared encoder Φ (UniDEC Sec. 3.2, Appendix C; DePSL = the DE half alone).

* DE head      Φ_D(·) = N(g1(Φ(·))),  g1 = Linear(d_Φ, d) → Tanh → Dropout(p)
* CLF head     Φ_C(·) = g2(Φ(·)),     g2 = Linear(d_Φ, d) → Dropout(p), not normalised
* classifiers  Ψ ∈ R^{L×d}, one row per label (a sparse-gradient embedding table)

Search (Sec. 3.3, Table 5): ``"concat"`` queries Φ_D(x) ⊕ N(Φ_C(x)) against Φ_D(z_l) ⊕ N(Ψ_l), so a
score is the sum of the DE and the classifier cosines; ``"de"`` is UniDEC-DE (Φ_D only) and
``"clf"`` UniDEC-CLF (N(Φ_C(x)) against N(Ψ_l)). A network without classifiers (DePSL) searches
with ``"de"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from xdex.encoders.base import Encoder
from xdex.encoders.factory import load_encoder
from xdex.modules.heads_storage import read_heads, write_heads
from xdex.modules.network import Network, unit_rows
from xdex.modules.registry import register_network
from xdex.text.tokens import TokenizedTexts

SearchMode = Literal["concat", "de", "clf"]
SEARCH_MODES: tuple[str, ...] = ("concat", "de", "clf")


@register_network("unidec")
class UniDECNet(Network):
    """Encoder Φ with the DE head g1 and, when ``n_labels`` is given, the CLF head g2 and classifiers Ψ."""

    def __init__(
        self,
        encoder: Encoder,
        dim: int,
        n_labels: int | None = None,
        dropout: float = 0.1,
        search: SearchMode = "concat",
        sparse: bool = True,
    ):
        super().__init__()
        if dim < 1:
            raise ValueError(f"the head dimension must be positive, got {dim}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.encoder = encoder
        self._dim = dim
        self.dropout = float(dropout)
        self.de_head = nn.Sequential(nn.Linear(encoder.dim, dim), nn.Tanh(), nn.Dropout(dropout))
        self.clf_head: nn.Module | None = None
        self.classifier: nn.Embedding | None = None
        if n_labels is not None:
            self.clf_head = nn.Sequential(nn.Linear(encoder.dim, dim), nn.Dropout(dropout))
            self.classifier = nn.Embedding(n_labels, dim, sparse=sparse)
            nn.init.normal_(self.classifier.weight, std=dim**-0.5)
        self.search = search  # validated by the setter

    # -- shape of the network ---------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Dimension d of each head."""
        return self._dim

    @property
    def has_classifier(self) -> bool:
        return self.classifier is not None

    @property
    def search_modes(self) -> tuple[str, ...]:
        """The modes this network can search with: all three with classifiers, else ``"de"``."""
        return SEARCH_MODES if self.has_classifier else ("de",)

    @property
    def search(self) -> str:
        return self._search

    @search.setter
    def search(self, mode: str) -> None:
        if mode not in SEARCH_MODES:
            raise ValueError(f"search mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        if mode != "de" and not self.has_classifier:
            raise ValueError(f"search mode {mode!r} needs classifiers; this network has only the DE head")
        self._search = mode

    # -- training-time pieces (with the graph) ------------------------------------------------------
    def de(self, phi: torch.Tensor) -> torch.Tensor:
        """Φ_D from encoder outputs Φ(·): unit-norm DE embeddings."""
        return unit_rows(self.de_head(phi.float()))

    def clf(self, phi: torch.Tensor) -> torch.Tensor:
        """Φ_C from encoder outputs Φ(·): un-normalised classifier-space query embeddings."""
        if self.clf_head is None:
            raise ValueError("this network has no classifier head")
        return self.clf_head(phi.float())

    def classifiers(self, label_ids: torch.Tensor) -> torch.Tensor:
        """Rows Ψ_l of the given labels (sparse gradients)."""
        if self.classifier is None:
            raise ValueError("this network has no classifiers")
        return self.classifier(label_ids)

    def forward(self, tokens: TokenizedTexts) -> torch.Tensor:
        """Φ_D of the texts, with the graph (the embedding the DE losses score)."""
        return self.de(self.encoder(tokens))

    # -- search vectors (no graph) ----------------------------------------------------------------
    @torch.no_grad()
    def embed(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Φ_D of all texts (eval mode, input order): the space of hard-negative mining and clustering."""
        return self._heads_eval(lambda: self.de(self._phi(tokens, batch_size)))

    @torch.no_grad()
    def query_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Query-side search vectors for the current search mode."""
        def compute() -> torch.Tensor:
            phi = self._phi(tokens, batch_size)
            parts = []
            if self.search in ("concat", "de"):
                parts.append(self.de(phi).cpu())
            if self.search in ("concat", "clf"):
                parts.append(unit_rows(self.clf(phi)).cpu())
            return torch.cat(parts, dim=1)
        return self._heads_eval(compute)

    @torch.no_grad()
    def label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors for the current search mode (row l = label l)."""
        def compute() -> torch.Tensor:
            parts = []
            if self.search in ("concat", "de"):
                parts.append(self.de(self._phi(tokens, batch_size)).cpu())
            if self.search in ("concat", "clf"):
                classifier = self.classifier
                if classifier is None or len(tokens) != classifier.num_embeddings:
                    n = 0 if classifier is None else classifier.num_embeddings
                    raise ValueError(f"{len(tokens)} label texts for {n} classifiers")
                parts.append(F.normalize(classifier.weight.detach().float().cpu(), dim=-1))
            return torch.cat(parts, dim=1)
        return self._heads_eval(compute)

    def head_scores(self, queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray | None:
        """In ``"concat"`` mode the score is Φ_D(x)ᵀΦ_D(z_l) + N(Φ_C(x))ᵀN(Ψ_l): each half of the vectors gives one
        head's share (:meth:`Network.head_scores`)."""
        if self.search != "concat":
            return None
        d = self.dim
        return np.stack([np.einsum("ncd,nd->nc", vectors[..., :d], queries[:, :d]),
                         np.einsum("ncd,nd->nc", vectors[..., d:], queries[:, d:])], axis=-1)

    def new_label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors of labels added after training, from their texts alone (zero-shot), for the
        current search mode: Φ_D(z) for the DE part and, for the classifier part, N(Ψ_l) with Ψ_l ← Φ_C(z_l),
        the value a classifier starts from (``UniDECObjective.init_classifiers``; a new label gets it even in
        a recipe whose classifiers started at random). Both parts are what a query text gets, so these are
        the query vectors of the label texts: Φ_D(z) ⊕ N(Φ_C(z)) in ``"concat"`` mode."""
        return self.query_vectors(tokens, batch_size)

    def _phi(self, tokens: TokenizedTexts, batch_size: int) -> torch.Tensor:
        return self.encoder.embed(tokens, batch_size=batch_size).to(next(self.de_head.parameters()).device)

    def _heads_eval(self, compute) -> torch.Tensor:
        was_training = self.training
        self.eval()
        try:
            return compute().float().cpu()
        finally:
            self.train(was_training)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Write ``encoder/``, ``heads.json`` and ``heads.safetensors`` into ``folder``."""
        self.encoder.save(Path(folder) / "encoder")
        self.save_heads(folder)

    def save_heads(self, folder: str | Path) -> None:
        """Write ``heads.json`` and ``heads.safetensors`` (g1, g2, Ψ) into ``folder``."""
        heads = {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}
        write_heads(folder, self.kind, heads, {
            "dim": self.dim, "dropout": self.dropout, "search": self.search,
            "n_labels": None if self.classifier is None else self.classifier.num_embeddings,
        })

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> UniDECNet:
        folder = Path(folder)
        config, heads = read_heads(folder, cls.kind)
        try:
            net = cls(load_encoder(folder / "encoder"), int(config["dim"]), config.get("n_labels"),
                      float(config["dropout"]), cast(SearchMode, str(config["search"])))  # checked by the setter
            missing, unexpected = net.load_state_dict(heads, strict=False)
        except (KeyError, TypeError, RuntimeError) as e:
            raise ValueError(f"{folder}: the saved UniDEC heads are inconsistent ({e})") from None
        missing = [k for k in missing if not k.startswith("encoder.")]
        if missing or unexpected:
            raise ValueError(f"{folder}: the saved UniDEC heads do not match (missing {missing}, "
                             f"unexpected {unexpected})")
        return net
