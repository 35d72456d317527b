"""Softmax cross-entropy over the label pool (DEXML Eq. 3), a.k.a. multi-positive InfoNCE."""

from __future__ import annotations

import torch
from torch import Tensor

from xdex.losses.base import PoolLoss
from xdex.losses.temperature import Temperature, as_temperature


class SoftmaxCE(PoolLoss):
    """The "standard softmax" of DEXML (Eq. 3, Eq. 4 with the whole pool as negatives).

    With logits x_ij = s_ij / τ, each positive p of query i costs

        −log( e^{x_ip} / Σ_{j in pool} e^{x_ij} ),

    where the denominator holds every pool entry, the other positives included. The row
    loss ℓ_i sums these terms over the positives P_i (DEXML Eq. 3, Appendix C.2), or averages
    them when ``normalize=True`` (the 1/|P_i| of UniDEC's PAL-N, see :class:`~xdex.losses.PALN`).

    Args:
        temperature: τ, a number or a shared :class:`Temperature`. The default 0.05 suits
            cosine scores (DEXML Table 7).
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
        # −Σ_p log softmax(x_i)_p: torch's log_softmax kernel, not torch.logsumexp, whose exp takes a slow path on
        # every entry more than 87 below its row's largest, which unnormalised classifier scores at τ = 0.05 make
        # most of a row (5 times this loss's cost there; docs/benchmarks.md, "Loss cost against the scale of the
        # scores")
        log_probabilities = torch.log_softmax(self.temperature(scores), dim=1)
        losses = -log_probabilities.masked_fill(~positives, 0.0).sum(dim=1)
        if self.normalize:
            losses = losses / positives.sum(dim=1).clamp(min=1)
        return losses

    def extra_repr(self) -> str:
        return f"normalize={self.normalize}"


InfoNCE = SoftmaxCE
"""Multi-positive InfoNCE with the pool as negatives: the same loss as :class:`SoftmaxCE`."""
