"""DEXML's SoftTop-k loss (Eq. 6) on a smooth top-k operator with the analytic gradient of Eq. 7."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from xdex.losses.base import PoolLoss
from xdex.losses.temperature import Temperature, as_temperature


def _check_operator_args(x: Tensor, k: float, alpha: float, n_iter: int | None) -> None:
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"soft top-k needs a 2-D floating-point tensor, got shape {tuple(x.shape)}, dtype {x.dtype}")
    if not 0 < k < x.shape[1]:
        raise ValueError(f"soft top-k needs 0 < k < pool size, got k={k} for a pool of {x.shape[1]} labels")
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    if n_iter is not None and (isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1):
        raise ValueError(f"n_iter must be a positive integer or None, got {n_iter!r}")


@torch.no_grad()
def soft_top_k_threshold(x: Tensor, k: float, alpha: float = 2.0, n_iter: int | None = None) -> Tensor:
    """The threshold t_i of each row, shape ``[B, 1]``, with Σ_j σ(α (x_ij + t_i)) = k (DEXML Sec. 4.3).

    The sum grows with t, so bisection finds u = α t on the logits a = α x. The bracket
    [−max_j a_ij − c, −min_j a_ij + c] with c = log(P / min(k, P − k)) + 1 holds the root for
    every 0 < k < P: at its low end every sigmoid is below σ(−c), so their sum is below k; at
    its high end every sigmoid is above σ(c), so their sum is above k. Each of the ``n_iter``
    steps halves it; the default, 64 for float64 and 32 otherwise, reaches the resolution of
    ``x``'s dtype. No autograd graph is built (the gradient is Eq. 7).
    """
    _check_operator_args(x, k, alpha, n_iter)
    if n_iter is None:
        n_iter = 64 if x.dtype == torch.float64 else 32
    logits = alpha * x
    num_labels = x.shape[1]
    margin = math.log(num_labels / min(k, num_labels - k)) + 1.0
    low = -logits.max(dim=1, keepdim=True).values - margin
    high = -logits.min(dim=1, keepdim=True).values + margin
    for _ in range(n_iter):
        middle = (low + high) / 2
        below = torch.sigmoid(logits + middle).sum(dim=1, keepdim=True) < k
        low = torch.where(below, middle, low)
        high = torch.where(below, high, middle)
    return (low + high) / (2 * alpha)


class _LogSoftTopK(Function):
    """log SoftTop-k(x)_j = log σ(α (x_j + t_x)), with the backward pass of DEXML Eq. 7."""

    @staticmethod
    def forward(ctx, x: Tensor, k: float, alpha: float, n_iter: int | None) -> Tensor:
        logits = alpha * (x + soft_top_k_threshold(x, k, alpha, n_iter))
        ctx.alpha = alpha
        ctx.save_for_backward(logits)
        return F.logsigmoid(logits)

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None, None, None]:
        # Eq. 7: ∂z_l/∂x_i = σ'_l (1[i=l] − σ'_i / Σ_j σ'_j), with z = σ(α(x + t)), σ'_j = α z_j (1 − z_j).
        # For log z the row's vector-Jacobian product is u − v (Σ_l u_l) / (Σ_j v_j), where
        # u_l = g_l α (1 − z_l) and v = σ'.
        (logits,) = ctx.saved_tensors
        z = torch.sigmoid(logits)
        u = grad_output * ctx.alpha * (1 - z)
        v = ctx.alpha * z * (1 - z)
        v_sum = v.sum(dim=1, keepdim=True).clamp(min=torch.finfo(v.dtype).tiny)
        grad_x = u - v * (u.sum(dim=1, keepdim=True) / v_sum)
        return grad_x, None, None, None


def log_soft_top_k(x: Tensor, k: float, alpha: float = 2.0, n_iter: int | None = None) -> Tensor:
    """log of the soft top-k memberships z_ij = σ(α (x_ij + t_i)) of each row of ``x`` (DEXML Sec. 4.3).

    The memberships of a row lie in (0, 1) and sum to k; larger α makes them closer to the
    0/1 indicator of the k largest entries. Differentiable with the analytic gradient of Eq. 7.
    """
    _check_operator_args(x, k, alpha, n_iter)
    return _LogSoftTopK.apply(x, k, alpha, n_iter)


class SoftTopK(PoolLoss):
    """SoftTop-k loss (DEXML Eq. 6) on the smooth top-k operator of Sec. 4.3.

    With x_ij = s_ij / τ and memberships z_i = SoftTop-k(x_i), z_ij = σ(α (x_ij + t_i)),

        ℓ_i = −(1/P) Σ_{j in P_i} log z_ij,

    P being the pool size (the paper's L, its pool being every label). The loss is small once
    every positive is among the top k of its row. ``normalize=True`` divides by |P_i| instead
    of P. The threshold t_i is found by bisection (:func:`soft_top_k_threshold`) and the
    gradient is the closed form of Eq. 7.

    Args:
        k: the prediction budget, 0 < k < P (default 5, the paper's SoftTop-5).
        alpha: steepness α of the sigmoid (default 2, DEXML Table 7).
        temperature: τ, a number or a shared :class:`Temperature` (default 0.05).
        learnable_temperature: learn τ, starting from ``temperature``.
        normalize: divide by |P_i| instead of the pool size.
        n_iter: bisection steps; None picks enough for the dtype of the scores.
    """

    def __init__(
        self,
        k: float = 5,
        alpha: float = 2.0,
        temperature: float | Temperature = 0.05,
        learnable_temperature: bool = False,
        normalize: bool = False,
        n_iter: int | None = None,
    ):
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0:
            raise ValueError(f"k must be a positive number, got {k!r}")
        if not alpha > 0:
            raise ValueError(f"alpha must be positive, got {alpha!r}")
        if n_iter is not None and (isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1):
            raise ValueError(f"n_iter must be a positive integer or None, got {n_iter!r}")
        self.k = k
        self.alpha = float(alpha)
        self.temperature = as_temperature(temperature, learnable_temperature)
        self.normalize = normalize
        self.n_iter = n_iter

    def row_losses(self, scores: Tensor, positives: Tensor) -> Tensor:
        log_z = log_soft_top_k(self.temperature(scores), self.k, self.alpha, self.n_iter)
        losses = -log_z.masked_fill(~positives, 0.0).sum(dim=1)
        divisor = positives.sum(dim=1).clamp(min=1) if self.normalize else scores.shape[1]
        return losses / divisor

    def extra_repr(self) -> str:
        return f"k={self.k}, alpha={self.alpha}, normalize={self.normalize}, n_iter={self.n_iter}"
