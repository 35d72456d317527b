"""The shared training loop, optimisers and schedules, and multi-process training (`xdex.train.distributed`)."""

from xdex.train.optim import OptimConfig, build_optimizers, build_schedulers, lr_factor
from xdex.train.trainer import Objective, Trainer, TrainerConfig

__all__ = ["OptimConfig", "build_optimizers", "build_schedulers", "lr_factor", "Objective", "Trainer",
           "TrainerConfig"]
