"""Batch collation: tokenised texts to the tensors an encoder reads.

* bag encoders: flat ids + offsets, the input of ``nn.EmbeddingBag`` (``include_last_offset=True``);
* transformers: ``input_ids`` + ``attention_mask`` padded to the longest text of the batch, not to
  ``max_length``, which roughly halves the cost of short texts.
"""

from __future__ import annotations

import numpy as np
import torch

from xdex.text.tokens import TokenizedTexts


def bag_inputs(batch: TokenizedTexts, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, offsets)`` as int64 tensors; ``offsets`` has ``B + 1`` entries. Arrays of a memory-mapped token cache
    are read-only; torch wraps only writable ones, so those are copied."""
    ids = torch.from_numpy(np.require(batch.ids, np.int64, ["C", "W"]))
    offsets = torch.from_numpy(np.require(batch.offsets, np.int64, ["C", "W"]))
    return ids.to(device), offsets.to(device)


def padded_inputs(
    batch: TokenizedTexts, pad_id: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of shape ``B x T`` with ``T`` the longest text (at least 1)."""
    lengths = batch.lengths
    width = max(int(lengths.max(initial=0)), 1)
    rows = np.repeat(np.arange(len(batch)), lengths)
    cols = np.arange(len(batch.ids)) - np.repeat(batch.offsets[:-1], lengths)
    input_ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    input_ids[rows, cols] = batch.ids
    attention_mask = np.zeros((len(batch), width), dtype=np.int64)
    attention_mask[rows, cols] = 1
    return torch.from_numpy(input_ids).to(device), torch.from_numpy(attention_mask).to(device)
