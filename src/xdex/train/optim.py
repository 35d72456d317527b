"""Optimisers and learning-rate schedules.

Dense parameters train with AdamW (no weight decay on biases and norm gains, as DEXML
Appendix B); sparse embedding tables (``sparse=True`` embeddings) with SparseAdam
(:class:`xdex.train.sparse_adam.RowSparseAdam`, torch's update in one compiled pass on the CPU). Each
parameter group can carry its own learning rate (UniDEC: encoder, heads and classifier
table at 1e-4, 2e-4 and 1e-3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from xdex.train.sparse_adam import RowSparseAdam


@dataclass
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 0.01
    lr_sparse: float = 1e-2
    warmup_ratio: float = 0.05
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    grad_clip: float | None = 1.0
    group_lr: dict = field(default_factory=dict)  # parameter-name prefix -> learning rate (dense or sparse)


def _is_sparse_param(module: nn.Module, name: str) -> bool:
    return isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse and name == "weight"


def build_optimizers(model: nn.Module, cfg: OptimConfig) -> list[torch.optim.Optimizer]:
    """AdamW over dense parameters (grouped by learning rate and decay), SparseAdam over sparse tables.

    A parameter takes the learning rate of the first ``group_lr`` prefix its name starts with, else
    ``lr`` (dense) or ``lr_sparse`` (sparse tables).
    """
    sparse: dict[float, list] = {}
    dense: dict[tuple[float, float], list] = {}
    for mod_name, module in model.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            lr = next((v for k, v in cfg.group_lr.items() if full.startswith(k)), None)
            if _is_sparse_param(module, p_name):
                sparse.setdefault(float(cfg.lr_sparse if lr is None else lr), []).append(p)
                continue
            lr = cfg.lr if lr is None else lr
            no_decay = p.ndim < 2 or isinstance(module, (nn.LayerNorm, nn.Embedding, nn.EmbeddingBag))
            wd = 0.0 if no_decay else cfg.weight_decay
            dense.setdefault((float(lr), wd), []).append(p)
    optimizers: list[torch.optim.Optimizer] = []
    if dense:
        groups = [{"params": ps, "lr": lr, "weight_decay": wd} for (lr, wd), ps in dense.items()]
        optimizers.append(torch.optim.AdamW(groups))
    if sparse:
        optimizers.append(RowSparseAdam([{"params": ps, "lr": lr} for lr, ps in sparse.items()]))
    if not optimizers:
        raise ValueError("the model has no trainable parameters")
    return optimizers


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    """Linear warm-up over ``warmup_ratio`` of the steps, then linear / cosine decay to 0 (or constant)."""
    warmup = int(cfg.warmup_ratio * total)
    if step < warmup:
        return (step + 1) / warmup
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if cfg.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return max(0.0, 1.0 - progress)


def build_schedulers(optimizers: list[torch.optim.Optimizer], total_steps: int, cfg: OptimConfig):
    return [torch.optim.lr_scheduler.LambdaLR(o, lambda s: lr_factor(s, total_steps, cfg)) for o in optimizers]
