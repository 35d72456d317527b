"""OAK's mutual-information calibration loss (OAK Eq. 6)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class MICalibration(nn.Module):
    """L = (1/N) Σ_i Σ_j [CD_ij + γ]_+ with CD_ij = δ_ij (x_i·y_j − x̂_i·y_j) (OAK Eq. 6).

    x_i is the plain document embedding, x̂_i the enriched one and y_j a label embedding.
    As OAK defines it, δ_ij = +1 when document i and label j are related and −1 otherwise,
    so the hinge covers every (document, label) pair of the batch: the enriched embedding
    is penalised for scoring a relevant label lower, or an irrelevant label higher, than
    the plain one, by less than the margin γ. N is the number of documents in the batch.

    ``forward(x[B, d], x_hat[B, d], y[P, d], positives[B, P]) -> scalar``.
    """

    def __init__(self, gamma: float):
        super().__init__()
        if not isinstance(gamma, (int, float)) or isinstance(gamma, bool):
            raise ValueError(f"gamma must be a number, got {gamma!r}")
        self.gamma = float(gamma)

    def forward(self, x: Tensor, x_hat: Tensor, y: Tensor, positives: Tensor) -> Tensor:
        _check_shapes(x, x_hat, y, positives)
        delta = positives.to(x.dtype) * 2 - 1
        confidence_difference = delta * ((x - x_hat) @ y.T)
        return (confidence_difference + self.gamma).clamp(min=0).sum() / max(x.shape[0], 1)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}"


def _check_shapes(x: Tensor, x_hat: Tensor, y: Tensor, positives: Tensor) -> None:
    for name, t in (("x", x), ("x_hat", x_hat), ("y", y)):
        if not isinstance(t, Tensor) or t.dim() != 2 or not t.is_floating_point():
            raise ValueError(f"{name} must be a 2-D floating-point embedding matrix, got {_describe(t)}")
    if x_hat.shape != x.shape:
        raise ValueError(f"x_hat has shape {tuple(x_hat.shape)} but x has shape {tuple(x.shape)}")
    if y.shape[1] != x.shape[1]:
        raise ValueError(f"y has dimension {y.shape[1]} but x has dimension {x.shape[1]}")
    if not isinstance(positives, Tensor) or positives.dtype != torch.bool:
        raise ValueError(f"positives must be a bool tensor, got {_describe(positives)}")
    if positives.shape != (x.shape[0], y.shape[0]):
        expected = (x.shape[0], y.shape[0])
        raise ValueError(f"positives has shape {tuple(positives.shape)}, expected (documents, labels) = {expected}")


def _describe(t: object) -> str:
    return f"shape {tuple(t.shape)} and dtype {t.dtype}" if isinstance(t, Tensor) else type(t).__name__
