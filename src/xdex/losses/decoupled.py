"""DEXML's DecoupledSoftmax loss (Eq. 5): other positives leave the softmax denominator."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from xdex.losses.base import PoolLoss, logsumexp, very_negative
from xdex.losses.temperature import Temperature, as_temperature


class DecoupledSoftmax(PoolLoss):
    """DecoupledSoftmax (DEXML Eq. 5).

    With logits x_ij = s_ij / τ and P_i the in-pool positives of query i, each positive p costs

        −log( e^{x_ip} / (e^{x_ip} + Σ_{j ∉ P_i} e^{x_ij}) ) = softplus( logsumexp_{j ∉ P_i} x_ij − x_ip ),

    so a confidently scored positive is never pushed down to make room for the others. As in
    the paper (Eq. 5 and Appendix C.2) the row loss ℓ_i sums over P_i and the batch loss is
    the mean of ℓ_i over queries; ``normalize=True`` averages over P_i instead. A row whose
    whole pool is positive has an empty negative sum and costs 0.

    Args:
        temperature: τ, a number or a shared :class:`Temperature` (default 0.05, DEXML Table 7).
        learnable_temperature: learn τ, starting from ``temperature``.
        normalize: divide each row's sum by |P_i|.
    """

    def __init__(
        self, temperature: float | Temperature = 0.05, learnable_temperature: bool = False, normalize: bool = False
    ):
        super().__init__()
        self.temperature = as_temperature(temperature, learnable_temperature)
        self.normalize = normalize

    def row_losses(self, scores: Tensor, positives: Tensor) -> Tensor:
        logits = self.temperature(scores)
        negatives_only = logits.masked_fill(positives, very_negative(logits.dtype))
        log_negatives = logsumexp(negatives_only, dim=1)
        rows, columns = positives.nonzero(as_tuple=True)  # the softplus of the positives alone, a few a row
        per_positive = torch.zeros_like(logits).index_put(
            (rows, columns), F.softplus(log_negatives[rows] - logits[rows, columns]))
        losses = per_positive.sum(dim=1)
        if self.normalize:
            losses = losses / positives.sum(dim=1).clamp(min=1)
        return losses

    def extra_repr(self) -> str:
        return f"normalize={self.normalize}"
