"""Temperature τ that turns similarity scores into logits, s / τ, fixed or learnable."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class Temperature(nn.Module):
    """Scales scores by 1/τ: ``forward(s) = s / τ`` (the τ of UniDEC's PSL loss and DEXML's Table 7).

    A fixed τ is stored as a buffer. With ``learnable=True`` the log-scale log(1/τ) is a
    parameter, as in CLIP, and the scale 1/τ is clamped to ``max_scale`` so that training
    cannot drive τ to zero. One instance may be shared by several losses (for example both
    directions of :class:`~xdex.losses.Symmetric`) so that they learn a single τ.
    """

    def __init__(self, tau: float = 1.0, learnable: bool = False, max_scale: float = 100.0):
        super().__init__()
        if isinstance(tau, bool) or not (isinstance(tau, (int, float)) and math.isfinite(tau) and tau > 0):
            raise ValueError(f"temperature must be a positive number, got {tau!r}")
        if not max_scale > 0:
            raise ValueError(f"max_scale must be positive, got {max_scale!r}")
        if learnable and 1.0 / tau > max_scale:
            raise ValueError(f"a learnable temperature needs tau >= 1/max_scale={1 / max_scale:g}, got {tau:g}")
        log_scale = torch.tensor(-math.log(tau))
        self.learnable = learnable
        self.max_scale = max_scale
        if learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    @property
    def tau(self) -> float:
        """The current temperature τ."""
        return 1.0 / float(self.scale())

    def scale(self) -> Tensor:
        """The factor 1/τ applied to scores."""
        scale = self.log_scale.exp()
        return scale.clamp(max=self.max_scale) if self.learnable else scale

    def forward(self, scores: Tensor) -> Tensor:
        return scores * self.scale().to(scores.dtype)

    def extra_repr(self) -> str:
        return f"tau={self.tau:.4g}, learnable={self.learnable}"


def as_temperature(temperature: float | Temperature, learnable: bool = False) -> Temperature:
    """A :class:`Temperature` from a number (fixed, or learnable from that start) or an existing module."""
    if isinstance(temperature, Temperature):
        if learnable and not temperature.learnable:
            raise ValueError("learnable_temperature=True needs a float temperature, not a fixed Temperature module")
        return temperature
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a positive number or a Temperature, got {temperature!r}")
    return Temperature(float(temperature), learnable=learnable)
