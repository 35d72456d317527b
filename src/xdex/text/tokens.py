"""Token ids of many texts in a flat, CSR-like layout: ``ids[offsets[i]:offsets[i + 1]]`` is text ``i``.

No padding is stored; the arrays may be memory-mapped from a :class:`~xdex.text.cache.TokenCache`.
Indexing with several indices gathers a batch (a new, in-memory :class:`TokenizedTexts`), which the
encoders collate for their own input format (see :mod:`xdex.text.collate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

IndexLike = int | slice | Sequence[int] | np.ndarray


@dataclass(frozen=True)
class TokenizedTexts:
    """``ids``: int32 token ids of all texts, concatenated; ``offsets``: int64, ``len(texts) + 1`` entries."""

    ids: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        if self.ids.ndim != 1 or self.ids.dtype != np.int32:
            raise ValueError(f"ids must be a flat int32 array, got {self.ids.dtype} with shape {self.ids.shape}")
        if self.offsets.ndim != 1 or self.offsets.dtype != np.int64 or len(self.offsets) == 0:
            raise ValueError(f"offsets must be a non-empty flat int64 array, got shape {self.offsets.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.ids):
            raise ValueError(f"offsets must run from 0 to {len(self.ids)}, got {self.offsets[0]}..{self.offsets[-1]}")

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> TokenizedTexts:
        """Pack one id array per text."""
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        ids = np.concatenate(arrays).astype(np.int32, copy=False) if arrays else np.zeros(0, dtype=np.int32)
        return cls(ids, offsets)

    @classmethod
    def concatenate(cls, parts: Sequence[TokenizedTexts]) -> TokenizedTexts:
        """Join several collections, in order (one is returned as it is)."""
        if not parts:
            return cls(np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64))
        if len(parts) == 1:  # what tokenizing fewer texts than a chunk gives: 8 us less for one text
            return parts[0]
        shifts = np.cumsum([0] + [len(p.ids) for p in parts[:-1]])
        shifted = [p.offsets[1:] + s for p, s in zip(parts, shifts, strict=True)]
        offsets = np.concatenate([[0], *shifted]).astype(np.int64)
        return cls(np.concatenate([p.ids for p in parts]).astype(np.int32, copy=False), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of tokens of each text (int64)."""
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        """The token ids of text ``i``."""
        return np.asarray(self.ids[self.offsets[i] : self.offsets[i + 1]])

    def __getitem__(self, indices: IndexLike) -> TokenizedTexts:
        """The texts at ``indices`` (an int, a slice, a sequence of ints or a boolean mask), as a batch."""
        idx = self._positions(indices)
        starts = np.asarray(self.offsets[idx])
        lengths = np.asarray(self.offsets[idx + 1]) - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        gather = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
        return TokenizedTexts(np.asarray(self.ids[gather], dtype=np.int32), offsets)

    def _positions(self, indices: IndexLike) -> np.ndarray:
        n = len(self)
        if isinstance(indices, slice):
            return np.arange(n, dtype=np.int64)[indices]
        idx = np.atleast_1d(np.asarray(indices))
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise IndexError(f"boolean mask of length {len(idx)} for {n} texts")
            return np.flatnonzero(idx)
        if idx.size == 0:
            return np.zeros(0, dtype=np.int64)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise IndexError(f"indices must be integers, a boolean mask or a slice, got {idx.dtype} {idx.shape}")
        if idx.min() < -n or idx.max() >= n:
            raise IndexError(f"index out of range for {n} texts (got {idx.min()}..{idx.max()})")
        return np.where(idx < 0, idx + n, idx).astype(np.int64)
