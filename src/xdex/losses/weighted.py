"""Weighted sums of named loss terms, each term kept for the training log.

    L = Σ_i w_i · L_i

UniDEC (Eq. 9): L = λ·L_D + (1 − λ)·L_C (+ a BCE term on the classifier scores); OAK (Eq. 7):
L = L(x̂·yᵀ) + L(x·yᵀ) + λ·L_MI-Calib. An objective holds one :class:`WeightedSum` as ``loss_terms``; the
trainer resets it at every epoch and logs the mean of every term (unweighted) as ``loss_<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch


class WeightedSum:
    """``L = Σ_i w_i · L_i`` over the terms given to :meth:`__call__`, with the weights fixed at construction."""

    def __init__(self, weights: Mapping[str, float]):
        for name, weight in weights.items():
            if not weight >= 0:
                raise ValueError(f"the weight of loss term {name!r} must be >= 0, got {weight}")
        self.weights = dict(weights)
        self._values: dict[str, list[float]] = {}

    def needs(self, name: str) -> bool:
        """Whether term ``name`` counts (a weight above 0), so the caller can skip computing it."""
        return self.weights.get(name, 0.0) > 0

    def __call__(self, **terms: torch.Tensor) -> torch.Tensor:
        """The weighted sum of ``terms`` (each a scalar tensor; unknown names are refused); every term's value
        is recorded for :meth:`summary`."""
        unknown = sorted(set(terms) - set(self.weights))
        if unknown:
            raise KeyError(f"loss terms without a weight: {', '.join(unknown)}")
        total: torch.Tensor | None = None
        for name, value in terms.items():
            self._values.setdefault(name, []).append(float(value.detach()))
            weighted = value if self.weights[name] == 1.0 else self.weights[name] * value
            total = weighted if total is None else total + weighted
        if total is None:
            raise ValueError("a weighted sum of no loss term")
        return total

    def reset(self) -> None:
        """Forget the recorded values (at the start of an epoch)."""
        self._values = {}

    def summary(self) -> dict[str, float]:
        """The mean value of every term recorded since :meth:`reset`, keyed ``loss_<name>``."""
        return {f"loss_{name}": float(np.mean(values)) for name, values in self._values.items()}
