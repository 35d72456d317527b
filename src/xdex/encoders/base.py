"""The encoder interface: tokenised texts in, one un-normalised ``d``-dimensional vector per text out.

Heads and losses L2-normalise the output where the method calls for it (e.g. the unit-norm
encoder :math:`\\mathcal{E}_\\theta` of DEXA Sec. 3). A saved encoder is a folder holding
``encoder.json`` (its type and settings), its weights in safetensors and its tokenizer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from xdex.jsonfile import read_json, write_json
from xdex.text.cache import TokenCache
from xdex.text.tokenizer import Tokenizer
from xdex.text.tokens import TokenizedTexts

CONFIG_FILE = "encoder.json"


class Encoder(nn.Module, ABC):
    """Base class of all encoders. Subclasses set ``kind``, ``special_tokens``, ``tokenizer``, ``max_length``."""

    kind: ClassVar[str]
    special_tokens: ClassVar[bool]
    # whether one pass over several batches of texts gives each batch's embeddings (texts do not interact, no
    # random draws) at less cost than a pass per batch (xdex.train.distributed.encode_together)
    joint_pass: ClassVar[bool] = False
    tokenizer: Tokenizer
    max_length: int

    @property
    @abstractmethod
    def dim(self) -> int:
        """Output dimension ``d``."""

    @abstractmethod
    def forward(self, batch: TokenizedTexts) -> torch.Tensor:
        """Embeddings of the ``B`` texts of ``batch``: a float32 ``B x d`` tensor, not normalised."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Settings written to ``encoder.json`` (besides ``type``), enough to rebuild the module."""

    @abstractmethod
    def save(self, folder: str | Path) -> None:
        """Write the encoder to ``folder``: ``encoder.json``, weights (safetensors) and tokenizer."""

    @classmethod
    @abstractmethod
    def load(cls, folder: str | Path) -> Encoder:
        """Read an encoder written by :meth:`save`."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        """Token ids of ``texts`` as this encoder reads them (in memory, not cached)."""
        return self.tokenizer.tokenize(texts, self.max_length, self.special_tokens)

    def token_cache(self, folder: str | Path | None = None) -> TokenCache:
        """A disk cache of token ids for this encoder's tokenizer, length and special tokens."""
        return TokenCache(self.tokenizer, self.max_length, special_tokens=self.special_tokens, folder=folder)

    @torch.no_grad()
    def embed(self, tokens: TokenizedTexts, batch_size: int = 256) -> torch.Tensor:
        """Embeddings of all texts (float32, on the CPU), computed in eval mode.

        Texts are batched in order of length so that little padding is computed; rows come back in
        the input order. Texts that fit in one batch go through at once (a served text: no ordering, no switch
        of the module's mode when it is in eval mode already).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if 0 < len(tokens) <= batch_size and not self.training:  # one batch, in eval mode already: no ordering
            return self(tokens).float().cpu()
        order = np.argsort(tokens.lengths, kind="stable")
        out = torch.empty(len(tokens), self.dim)
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                out[torch.from_numpy(rows)] = self(tokens[rows]).float().cpu()
        finally:
            self.train(was_training)
        return out

    def _write_config(self, folder: Path) -> None:
        write_json(folder / CONFIG_FILE, {"type": self.kind, **self.config()})


def read_config(folder: str | Path, kind: str | None = None) -> dict[str, Any]:
    """``encoder.json`` of a saved encoder; ``kind`` checks its type."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {CONFIG_FILE}; not a saved xdex encoder")
    config = read_json(path)
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise ValueError(f"{path}: expected a JSON object with a string 'type'")
    if kind is not None and config["type"] != kind:
        raise ValueError(f"{path}: encoder type is {config['type']!r}, expected {kind!r}")
    return config
