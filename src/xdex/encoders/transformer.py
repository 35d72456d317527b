"""Transformer encoder: a Hugging Face model read from a local folder, pooled to one vector per text.

Pooling (as in sentence-transformers, which trained all-MiniLM-L6-v2 with mean pooling):

* ``"mean"``: ``e(x) = sum_j m_j h_j / sum_j m_j`` over the last hidden states ``h_j`` with attention
  mask ``m`` (special tokens included, padding excluded);
* ``"cls"``: ``e(x) = h_0``, the state of the ``[CLS]`` token.

With ``bf16=True`` the forward pass runs under ``torch.autocast(dtype=torch.bfloat16)`` (weights stay
float32); on CPUs with AVX-512 BF16 a training step takes 0.55-0.6 times the time of float32, and
all-MiniLM-L6-v2 embeddings stay at cosine >= 0.9999 to float32 (docs/benchmarks.md, "Transformer training step
on the CPU"). :func:`xdex.hardware.cpu_has_bf16` tells whether the CPU computes bf16 natively; without it, torch
emulates bf16, which is commonly slower than float32 (not measured here).
With ``bf16=False`` an autocast region opened by the caller still applies.
Needs the optional ``transformers`` package; nothing is ever downloaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from xdex.encoders.base import Encoder, read_config
from xdex.text.collate import padded_inputs
from xdex.text.tokenizer import Tokenizer
from xdex.text.tokens import TokenizedTexts

if TYPE_CHECKING:
    from transformers import PreTrainedModel

POOLINGS = ("mean", "cls")


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide the progress bars ``transformers`` draws while reading and writing weights."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load_model(model_dir: Path) -> PreTrainedModel:
    """The bare model (no task head) of a local Hugging Face folder, in float32; never downloads."""
    try:
        from transformers import AutoModel
    except ImportError as e:
        raise ImportError("the transformer encoder needs the 'transformers' package (the 'transformers' extra)") from e
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: no config.json; not a Hugging Face model folder")
    try:
        with _quiet():
            return AutoModel.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise ValueError(f"{model_dir}: cannot load the model ({e})") from None


class Transformer(Encoder):
    """A pre-trained transformer with mean or CLS pooling (see the module docstring)."""

    kind = "transformer"
    special_tokens = True
    model: PreTrainedModel

    def __init__(self, model_dir: str | Path, *, pooling: str = "mean", max_length: int = 32, bf16: bool = False):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir}: not a folder")
        self.tokenizer = Tokenizer.from_pretrained_dir(model_dir)
        self.model = _load_model(model_dir)
        config = self.model.config
        if self.tokenizer.vocab_size > config.vocab_size:
            raise ValueError(
                f"{model_dir}: the tokenizer has {self.tokenizer.vocab_size} tokens, the model only {config.vocab_size}"
            )
        limit = getattr(config, "max_position_embeddings", None)
        if max_length < 3 or (limit is not None and max_length > limit):
            raise ValueError(f"max_length must be between 3 and {limit}, got {max_length}")
        self.pooling = pooling
        self.max_length = max_length
        self.bf16 = bf16

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def forward(self, batch: TokenizedTexts) -> torch.Tensor:
        input_ids, attention_mask = padded_inputs(batch, self.tokenizer.pad_id, self.device)
        # Without bf16 the caller's autocast state (if any) applies unchanged.
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        with autocast:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        hidden = hidden.float()
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    def config(self) -> dict[str, Any]:
        return {"pooling": self.pooling, "max_length": self.max_length, "bf16": self.bf16}

    def save(self, folder: str | Path) -> None:
        """Write the Hugging Face model files, the tokenizer and ``encoder.json``; each file atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=".model."))
        try:
            with _quiet():
                self.model.save_pretrained(str(staging))
            for path in staging.iterdir():
                os.replace(path, folder / path.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.tokenizer.save(folder)
        self._write_config(folder)

    @classmethod
    def load(cls, folder: str | Path) -> Transformer:
        config = read_config(folder, cls.kind)
        try:
            pooling, max_length, bf16 = str(config["pooling"]), int(config["max_length"]), bool(config["bf16"])
        except KeyError as e:
            raise ValueError(f"{folder}: encoder.json lacks the setting {e}") from None
        return cls(folder, pooling=pooling, max_length=max_length, bf16=bf16)
