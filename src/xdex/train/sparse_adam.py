"""SparseAdam for embedding tables, with a CPU step that updates each gradient row in one compiled pass.

The update is that of ``torch.optim.SparseAdam`` (torch/optim/_functional.py, ``sparse_adam``; Adam of
Kingma & Ba 2015, applied lazily to the rows a gradient holds): for each row ``i`` of the coalesced
gradient ``g``, with the parameter's step count ``t``,

    m_i ← m_i + (1 − β1)(g_i − m_i),    v_i ← v_i + (1 − β2)(g_i² − v_i),
    θ_i ← θ_i − lr · √(1 − β2^t) / (1 − β1^t) · m_i / (√v_i + ε),

every other row of ``θ``, ``m`` and ``v`` left as it is. The optimiser is a subclass of torch's, with the same
state (``step``, ``exp_avg``, ``exp_avg_sq``) and the same checkpoints.

Why a step of our own: torch's runs the update as some fifteen passes over the gradient's rows, of which
two ``sparse_mask`` gathers and three sparse-into-dense ``add_`` scatters, and coalesces every gradient (a
sort and a merge of its rows) unless it is flagged coalesced, a flag that autograd drops when it stores a
gradient. A bag encoder's step over a batch of 256 texts and ~1,000 labels touches ~16,000 rows of 256 floats
of its token table; there torch's step took 53-91 ms and this one pass (reading ``g``, ``m``, ``v``, ``θ`` once,
writing ``m``, ``v``, ``θ``) 13-21 ms, medians of three runs on 2 busy cores (docs/benchmarks.md, "Steps over
large label pools, after"). torch's SparseAdam has no fused or foreach variant.
A gradient whose indices strictly increase (one row per index, sorted: the bag encoder's, a label pool's)
needs no coalescing. The arithmetic is float32, operation for operation that of torch's step. The loop is
compiled at the first step of a new installation (about 2 s), then read from numba's cache.

Anything else takes torch's own step: parameters off the CPU, not float32, not contiguous or not
two-dimensional, gradients with more than one sparse dimension, and ``maximize=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch
from torch import Tensor
from torch.autograd.graph import increment_version


# error_model="numpy": the division is not checked for a zero divisor (it has none: eps > 0), which lets the loop
# run on vector instructions, 2.4-2.6 times faster and to the same bits (docs/benchmarks.md, "Training at scale")
@numba.njit(cache=True, nogil=True, error_model="numpy")
def _adam_rows(param: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, rows: np.ndarray,
               values: np.ndarray, one_minus_beta1: np.float32, one_minus_beta2: np.float32, eps: np.float32,
               neg_step_size: np.float32) -> None:
    """The update of the module docstring, in place, for the gradient rows ``values`` of parameter rows ``rows``."""
    for r in range(rows.shape[0]):
        i = rows[r]
        for j in range(values.shape[1]):
            g = values[r, j]
            m = exp_avg[i, j] + (g - exp_avg[i, j]) * one_minus_beta1
            v = exp_avg_sq[i, j] + (g * g - exp_avg_sq[i, j]) * one_minus_beta2
            exp_avg[i, j] = m
            exp_avg_sq[i, j] = v
            param[i, j] += neg_step_size * (m / (np.sqrt(v) + eps))


def _strictly_increasing(indices: Tensor) -> bool:
    return bool((indices[1:] > indices[:-1]).all())


def _compiled_step_fits(param: Tensor, maximize: bool) -> bool:
    grad = param.grad
    if grad is None:
        return True
    return (not maximize and param.device.type == "cpu" and param.dtype == torch.float32 and param.ndim == 2
            and param.is_contiguous() and grad.is_sparse and grad.sparse_dim() == 1 and grad.dense_dim() == 1
            and grad.dtype == torch.float32)


class RowSparseAdam(torch.optim.SparseAdam):
    """``torch.optim.SparseAdam`` whose CPU step runs one compiled pass over the gradient's rows (module docstring)."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One optimisation step: the compiled one when every parameter with a gradient fits it, else torch's."""
        if not all(_compiled_step_fits(p, bool(group.get("maximize", False)))
                   for group in self.param_groups for p in group["params"]):
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr = float(group["lr"])
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, lr, beta1, beta2, group["eps"])
        return loss

    def _update(self, p: Tensor, grad: Tensor, lr: float, beta1: float, beta2: float, eps: float) -> None:
        state = self.state[p]
        if len(state) == 0:  # as torch's step: counted from the first gradient
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        if not grad.is_coalesced() and not _strictly_increasing(grad._indices()[0]):
            grad = grad.coalesce()  # the update is not linear: one row per index
        rows, values = grad._indices()[0], grad._values()
        if values.numel() == 0:
            return
        step = state["step"]
        step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
        _adam_rows(p.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy(),
                   rows.contiguous().numpy(), values.contiguous().numpy(), np.float32(1 - beta1),
                   np.float32(1 - beta2), np.float32(eps), np.float32(-step_size))
        increment_version(p)  # written through numpy: a graph that saved p sees the change, as after torch's add_
