"""The contract shared by the engine losses: scores over a batch's label pool and a positives mask.

Every engine loss is called as ``loss(scores, positives)``:

* ``scores[i, j]`` (float, shape ``[B, P]``) is the similarity (cosine or dot product) of
  query i with label j of the batch's label pool;
* ``positives[i, j]`` (bool, same shape) marks every positive of query i present in the pool,
  so an in-batch positive is never used as a negative.

A loss computes one value ℓ_i per query row and returns their mean over the rows that have at
least one positive; rows without a positive contribute nothing, and a batch without any
positive gives a loss of 0 that still back-propagates (zero gradients).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn


def check_pool(scores: Tensor, positives: Tensor) -> None:
    """Raise ValueError unless ``scores`` is a 2-D float tensor and ``positives`` a bool mask of its shape."""
    if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        what = _describe(scores)
        raise ValueError(f"scores must be a 2-D floating-point tensor [queries, pool labels], got {what}")
    if not isinstance(positives, Tensor) or positives.dtype != torch.bool:
        raise ValueError(f"positives must be a bool tensor, got {_describe(positives)}")
    if positives.shape != scores.shape:
        raise ValueError(f"positives has shape {tuple(positives.shape)} but scores has shape {tuple(scores.shape)}")
    if scores.shape[1] == 0:
        raise ValueError("the label pool is empty: scores has 0 columns")
    if positives.device != scores.device:
        raise ValueError(f"positives is on {positives.device} but scores is on {scores.device}")


def _describe(t: object) -> str:
    return f"shape {tuple(t.shape)} and dtype {t.dtype}" if isinstance(t, Tensor) else type(t).__name__


def very_negative(dtype: torch.dtype) -> float:
    """The finite fill value that removes an entry from a logsumexp or a top-k (no inf, so no NaN gradients)."""
    return torch.finfo(dtype).min


def logsumexp(x: Tensor, dim: int) -> Tensor:
    """``torch.logsumexp(x, dim)``, computed as ``x_k − log_softmax(x)_k`` at each row's largest entry ``k``.

    The same value and gradient (``softmax(x)``) up to rounding; torch's logsumexp takes a slow path on every
    entry more than about 87 below its row's largest (where e^x leaves float32's normal range: torch.exp took 60
    to 180 times as long there on an x86 CPU), which unnormalised scores at a low temperature make most of a row;
    its log_softmax does not
    (docs/benchmarks.md, "Loss cost against the scale of the scores").
    """
    at = x.detach().argmax(dim=dim, keepdim=True)
    return (x.gather(dim, at) - torch.log_softmax(x, dim=dim).gather(dim, at)).squeeze(dim)


def mean_over_rows_with_positives(row_losses: Tensor, positives: Tensor) -> Tensor:
    """Mean of ``row_losses[i]`` over the rows i with at least one positive (0 when there is none)."""
    has_positive = positives.any(dim=1)
    total = row_losses.masked_fill(~has_positive, 0.0).sum()
    return total / has_positive.sum().clamp(min=1)


class PoolLoss(nn.Module, ABC):
    """Base of the engine losses: ``forward(scores[B, P], positives[B, P]) -> scalar``.

    Subclasses implement :meth:`row_losses`, which must be finite on every row (also rows
    without positives or without negatives); :meth:`forward` checks the inputs, computes in
    at least float32 (half-precision scores, e.g. under autocast, are upcast) and averages
    the rows that have a positive.
    """

    @abstractmethod
    def row_losses(self, scores: Tensor, positives: Tensor) -> Tensor:
        """The loss ℓ_i of each query row, shape ``[B]``."""

    def forward(self, scores: Tensor, positives: Tensor) -> Tensor:
        check_pool(scores, positives)
        if torch.finfo(scores.dtype).bits < 32:
            scores = scores.float()
        return mean_over_rows_with_positives(self.row_losses(scores, positives), positives)
