"""NGAME's triplet loss with a margin over the hardest in-pool negatives."""

from __future__ import annotations

import torch
from torch import Tensor

from xdex.losses.base import PoolLoss, very_negative
from xdex.losses.temperature import Temperature, as_temperature


class Triplet(PoolLoss):
    """Triplet loss with online hard-negative mining, as NGAME trains its encoder.

    DEXA Eq. 3 (and UniDEC Sec. 2.1, OAK Eq. 4) write NGAME's loss as
    Σ_i Σ_{p in P_i, n in N̂_i} [s_in − s_ip + γ]_+. Here N̂_i = H_i, the ``num_negatives``
    highest-scored non-positive entries of row i (fewer if the row has fewer negatives), and
    with hinges h_ipn = [s_in − s_ip + γ]_+ on the raw scores

        ℓ_i = Σ_{p in P_i} Σ_{n in H_i} w_ipn h_ipn.

    Without weighting w_ipn = 1. With ``softmax_weighting=True`` the negatives that violate
    the margin for positive p share a unit weight by a softmax of their scores,

        w_ipn = 1[h_ipn > 0] e^{s_in/τ} / Σ_{n' in H_i} 1[h_ipn' > 0] e^{s_in'/τ},

    the rescaling of NGAME's released triplet loss (there with one sampled positive per
    query; here every in-pool positive). Gradients flow through the weights as well.
    Memory is O(B·P) for the mining plus O(B·m·k) for the hinges, m being the largest number
    of positives in a row and k = ``num_negatives``.

    Args:
        margin: γ (default 0.3, NGAME's).
        num_negatives: k, how many hardest negatives each positive is compared with.
        softmax_weighting: weight the violating negatives by a softmax of their scores.
        temperature: τ of that softmax, a number or a shared :class:`Temperature` (default 0.1).
        learnable_temperature: learn τ, starting from ``temperature``.
    """

    def __init__(
        self,
        margin: float = 0.3,
        num_negatives: int = 10,
        softmax_weighting: bool = False,
        temperature: float | Temperature = 0.1,
        learnable_temperature: bool = False,
    ):
        super().__init__()
        if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
            raise ValueError(f"num_negatives must be a positive integer, got {num_negatives!r}")
        self.margin = float(margin)
        self.num_negatives = num_negatives
        self.softmax_weighting = softmax_weighting
        self.temperature = as_temperature(temperature, learnable_temperature)

    def row_losses(self, scores: Tensor, positives: Tensor) -> Tensor:
        fill = very_negative(scores.dtype)
        k = min(self.num_negatives, scores.shape[1])
        hard, _ = scores.masked_fill(positives, fill).topk(k, dim=1)
        hard_valid = torch.arange(k, device=scores.device) < (~positives).sum(dim=1, keepdim=True)

        num_positives = positives.sum(dim=1, keepdim=True)
        m = int(num_positives.max()) if num_positives.numel() else 0
        # The m lowest entries once non-positives are set to +max: every positive of the row, padded.
        pos, _ = scores.masked_fill(~positives, torch.finfo(scores.dtype).max).topk(m, dim=1, largest=False)
        pos_valid = torch.arange(m, device=scores.device) < num_positives

        valid = pos_valid[:, :, None] & hard_valid[:, None, :]
        hinge = (hard[:, None, :] - pos[:, :, None] + self.margin).clamp(min=0).masked_fill(~valid, 0.0)
        if self.softmax_weighting:
            violating = valid & (hinge > 0)
            weight_logits = self.temperature(hard.masked_fill(~hard_valid, 0.0))[:, None, :].expand_as(hinge)
            weights = torch.softmax(weight_logits.masked_fill(~violating, fill), dim=2)
            hinge = hinge * weights
        return hinge.sum(dim=(1, 2))

    def extra_repr(self) -> str:
        return f"margin={self.margin}, num_negatives={self.num_negatives}, softmax_weighting={self.softmax_weighting}"
