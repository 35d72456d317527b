"""UniDEC's symmetric loss: query-to-label plus label-to-query over the same batch."""

from __future__ import annotations

from torch import Tensor, nn

from xdex.losses.base import check_pool


class Symmetric(nn.Module):
    """L = λ · q2l(S, M) + (1 − λ) · l2q(Sᵀ, Mᵀ) (UniDEC Sec. 3.1, L_D), λ = ``q2l_weight``.

    In the label-to-query direction each pool label is a row scored against the batch's
    queries, its positives being the queries it annotates (UniDEC's P_l^B); labels with no
    positive query are ignored by the inner loss, as rows without positives always are.

    Args:
        q2l_loss: the engine loss for the query-to-label direction.
        l2q_loss: the loss for the label-to-query direction; the same module as ``q2l_loss``
            when omitted (sharing its temperature).
        q2l_weight: λ in [0, 1], the weight of the query-to-label direction (default 0.5, UniDEC's λ_D).
    """

    def __init__(self, q2l_loss: nn.Module, l2q_loss: nn.Module | None = None, q2l_weight: float = 0.5):
        super().__init__()
        if not 0.0 <= q2l_weight <= 1.0:
            raise ValueError(f"q2l_weight must be in [0, 1], got {q2l_weight!r}")
        self.q2l_loss = q2l_loss
        self.l2q_loss = q2l_loss if l2q_loss is None else l2q_loss
        self.q2l_weight = float(q2l_weight)

    def forward(self, scores: Tensor, positives: Tensor) -> Tensor:
        check_pool(scores, positives)
        w = self.q2l_weight
        return w * self.q2l_loss(scores, positives) + (1.0 - w) * self.l2q_loss(scores.T, positives.T)

    def extra_repr(self) -> str:
        return f"q2l_weight={self.q2l_weight}"
