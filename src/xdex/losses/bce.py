"""One-vs-all binary cross-entropy over the label pool (DEXML Eq. 2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from xdex.losses.base import PoolLoss
from xdex.losses.temperature import Temperature, as_temperature


class BCE(PoolLoss):
    """OvA binary cross-entropy with logits (DEXML Eq. 2), averaged over the pool.

    With x_ij = s_ij / τ, y_ij = positives[i, j] and positive weight w,

        ℓ_i = (1/P) Σ_j [ −w y_ij log σ(x_ij) − (1 − y_ij) log(1 − σ(x_ij)) ],

    Eq. 2 divided by the pool size P so that the scale does not grow with the pool.

    Args:
        pos_weight: w, the weight of the positive terms (default 1).
        temperature: τ, a number or a shared :class:`Temperature` (default 1: classifier
            scores are already logits).
        learnable_temperature: learn τ, starting from ``temperature``.
    """

    def __init__(
        self, pos_weight: float = 1.0, temperature: float | Temperature = 1.0, learnable_temperature: bool = False
    ):
        super().__init__()
        if not pos_weight > 0:
            raise ValueError(f"pos_weight must be positive, got {pos_weight!r}")
        self.pos_weight = float(pos_weight)
        self.temperature = as_temperature(temperature, learnable_temperature)

    def row_losses(self, scores: Tensor, positives: Tensor) -> Tensor:
        logits = self.temperature(scores)
        pos_weight = torch.tensor(self.pos_weight, dtype=logits.dtype, device=logits.device)
        per_entry = F.binary_cross_entropy_with_logits(
            logits, positives.to(logits.dtype), pos_weight=pos_weight, reduction="none"
        )
        return per_entry.mean(dim=1)

    def extra_repr(self) -> str:
        return f"pos_weight={self.pos_weight}"
