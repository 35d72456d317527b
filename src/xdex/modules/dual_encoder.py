"""Dual encoder: one encoder Φ shared by queries and labels, embeddings on the unit sphere.

The score of query x and label l is the cosine Φ(x)·Φ(z_l) (NGAME; DEXML Sec. 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from xdex.encoders.base import Encoder
from xdex.encoders.factory import load_encoder
from xdex.modules.network import Network, unit_rows
from xdex.modules.registry import register_network
from xdex.text.tokens import TokenizedTexts


@register_network("dual_encoder")
class DualEncoder(Network):
    """``forward(tokens)`` gives L2-normalised embeddings of the texts, with the graph."""

    search = "de"  # queries and labels share one space; no other search mode
    search_modes: tuple[str, ...] = ("de",)

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @property
    def joint_pass(self) -> bool:
        """Whether one pass over several batches of texts is the cheaper way (the encoder's ``joint_pass``)."""
        return self.encoder.joint_pass

    def forward(self, tokens: TokenizedTexts) -> torch.Tensor:
        return F.normalize(self.encoder(tokens).float(), dim=-1)

    @torch.no_grad()
    def embed(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Normalised embeddings of all texts, no graph, eval mode, input order."""
        return unit_rows(self.encoder.embed(tokens, batch_size=batch_size))

    def query_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Query-side search vectors: the normalised embeddings."""
        return self.embed(tokens, batch_size)

    def label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors: the normalised embeddings."""
        return self.embed(tokens, batch_size)

    def new_label_vectors(self, tokens: TokenizedTexts, batch_size: int = 512) -> torch.Tensor:
        """Label-side search vectors of labels added after training, from their texts alone (zero-shot): the
        normalised embeddings, as for trained labels (queries and labels share one space, so these are also
        the texts' query vectors)."""
        return self.query_vectors(tokens, batch_size)

    def save(self, folder: str | Path) -> None:
        """Write the encoder to ``folder/encoder``."""
        self.encoder.save(Path(folder) / "encoder")

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> DualEncoder:
        return cls(load_encoder(Path(folder) / "encoder"))
