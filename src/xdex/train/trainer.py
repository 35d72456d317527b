"""The training loop every recipe shares.

A recipe supplies an :class:`Objective` (its model, how an epoch's batches are built, the loss of a
batch, and the refresh hooks that run every τ epochs); the trainer owns everything else: optimisers
and schedules, gradient clipping, bf16 autocast, checkpoints written atomically after every epoch (or once
``checkpoint_seconds`` have passed since the last one) on a thread of their own while the next epoch trains,
exact resume, a JSONL metrics log and model selection on a validation split.

Under ``torchrun`` (see :mod:`xdex.train.distributed`) every rank runs the same loop over the same
batches; the model is wrapped in DistributedDataParallel, which averages the gradients across ranks
during the backward pass (sparse embedding gradients included, on gloo). Objectives whose loss runs
backward passes of its own (``nested_backward = True``, e.g. a gradient cache), and sparse gradients
on nccl, have their gradients averaged explicitly after the backward pass instead. After the refresh
hooks of every epoch the ranks are checked to hold the same objective state (rank 0's is taken
otherwise) and rank 0's parameters and buffers are broadcast. Validation, checkpoints, the metrics
log and progress bars are rank 0's; the other ranks wait at a barrier.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from xdex.atomic import atomic_write_text
from xdex.hardware import denormals_flushed, resolve_device
from xdex.train import distributed as dist
from xdex.train.checkpoint import CheckpointError, CheckpointWriter, load_checkpoint
from xdex.train.optim import OptimConfig, build_optimizers, build_schedulers
from xdex.train.threads import StepThreads, intra_op_threads

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
METRICS_LOG = "metrics.jsonl"


class Objective(Protocol):
    """What a recipe plugs into the trainer."""

    @property
    def model(self) -> nn.Module:
        """Everything the optimisers train."""

    def steps_per_epoch(self) -> int:
        """Number of batches in an epoch (fixes the learning-rate schedule)."""

    def start_epoch(self, epoch: int) -> None:
        """Run the refresh hooks due at ``epoch`` (clustering, hard negatives, ...)."""

    def batches(self, epoch: int) -> Sequence[Any]:
        """The batches of ``epoch``; must depend only on the objective's state and ``epoch``."""

    def loss(self, batch: Any) -> torch.Tensor:
        """Scalar loss of one batch, with the graph attached."""

    def epoch_stats(self) -> dict[str, float]:
        """Statistics of the epoch just finished (e.g. average positives per label pool)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class TrainerConfig:
    epochs: int = 20
    optim: OptimConfig = field(default_factory=OptimConfig)
    bf16: bool = False
    device: str = "auto"  # "auto" (CUDA when available, else CPU), "cpu", "cuda", "cuda:1", ...
    eval_every: int = 2
    select_metric: str = "P@1"
    seed: int = 0
    progress: bool = True
    scale_lr_with_world: bool = False  # multiply every learning rate by the number of ranks (linear scaling)
    # write the checkpoint after an epoch only once this many seconds have passed since the last one (0: after every
    # epoch); the last epoch's is always written. Epochs of a fraction of a second (a GPU) otherwise spend as long
    # writing the model and its optimiser state as training; a crash loses at most this much of the run.
    checkpoint_seconds: float = 0.0


class ObjectiveModule(nn.Module):
    """``objective.loss`` as the forward pass of a module holding ``objective.model``, for DDP to wrap: DDP
    averages the gradients of the backward pass that follows its forward pass."""

    def __init__(self, objective: Objective):
        super().__init__()
        self.model = objective.model
        self.objective = objective

    def forward(self, batch: Any) -> torch.Tensor:
        return self.objective.loss(batch)


class Trainer:
    """Trains ``objective.model``; ``evaluate`` (validation metrics, higher is better) selects the model kept."""

    def __init__(
        self,
        objective: Objective,
        config: TrainerConfig,
        workdir: str | Path,
        evaluate: Callable[[], dict[str, float]] | None = None,
        step_threads: int | StepThreads | None = None,
    ):
        """``step_threads``: intra-op threads of the training steps, a count or a :class:`StepThreads` that chooses
        one by timing the steps (None: torch's setting; ``train/threads.py``)."""
        self.objective = objective
        self.step_threads = step_threads
        self.model = objective.model
        self.cfg = config
        self.device = resolve_device(config.device, "trainer.device")
        self.model.to(self.device)
        self.workdir = Path(workdir)
        self.evaluate = evaluate
        self.history: list[dict] = []
        self.best_score = -float("inf")
        self.best_epoch = -1
        self.best_state: dict | None = None
        self.ddp: DistributedDataParallel | None = None
        self._last_checkpoint = time.perf_counter()  # when the last checkpoint was written (or the fit started)
        self._checkpoints = CheckpointWriter()  # writes them while the next epoch trains

    def fit(self, resume: bool = False) -> list[dict]:
        """Train for ``config.epochs`` epochs; with ``resume`` continue from the last checkpoint."""
        torch.manual_seed(self.cfg.seed)
        total = max(1, self.objective.steps_per_epoch() * self.cfg.epochs)
        optim = self.optim_config()
        self.optimizers = build_optimizers(self.model, optim)
        self.schedulers = build_schedulers(self.optimizers, total, optim)
        start = 0
        if resume:
            start = self._load_checkpoint()
        self._last_checkpoint = time.perf_counter()
        try:
            with denormals_flushed():  # a confident model's softmax would otherwise compute with slow subnormals
                for epoch in range(start, self.cfg.epochs):
                    self._train_epoch(epoch)
        finally:
            self._checkpoints.close()  # the last checkpoint is on disk when the fit ends, or fails
        self.ddp = None
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
            log.info("kept the model of epoch %d (%s = %.2f on validation)",
                     self.best_epoch + 1, self.cfg.select_metric, self.best_score)
        if dist.is_distributed():  # every rank continues with rank 0's kept model and record
            kept = {k: v.cpu() for k, v in self.model.state_dict().items()} if dist.is_main() else None
            self.model.load_state_dict(dist.broadcast_object(kept))
            self.history, self.best_score, self.best_epoch = dist.broadcast_object(
                (self.history, self.best_score, self.best_epoch))
        return self.history

    def optim_config(self) -> OptimConfig:
        """The optimiser settings, every learning rate times the number of ranks with ``scale_lr_with_world``."""
        g = dist.world_size()
        cfg = self.cfg.optim
        if not self.cfg.scale_lr_with_world or g == 1:
            return cfg
        return dataclasses.replace(cfg, lr=cfg.lr * g, lr_sparse=cfg.lr_sparse * g,
                                   group_lr={k: v * g for k, v in cfg.group_lr.items()})

    @property
    def averages_explicitly(self) -> bool:
        """Whether gradients are averaged after the backward pass rather than by DDP during it."""
        sparse = any(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse for m in self.model.modules())
        return bool(getattr(self.objective, "nested_backward", False)) or (sparse and dist.backend_name() == "nccl")

    # -- one step and one epoch --------------------------------------------------------------
    def step(self, batch: Any) -> float:
        """One optimisation step on ``batch`` (forward under autocast, backward, gradient averaging across
        ranks, clipping, optimiser and scheduler steps); returns the batch's loss.

        Needs the optimisers and schedulers that :meth:`fit` builds (or that a caller set on the trainer).
        """
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            loss = self.objective.loss(batch) if self.ddp is None else self.ddp(batch)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if dist.is_distributed() and self.ddp is None:
            dist.average_gradients(self.model)
        if self.cfg.optim.grad_clip:
            dense = [p for p in self.model.parameters() if p.grad is not None and not p.grad.is_sparse]
            torch.nn.utils.clip_grad_norm_(dense, self.cfg.optim.grad_clip)
        for opt in self.optimizers:
            opt.step()
        for sch in self.schedulers:
            sch.step()
        return float(loss.detach())

    def _timed_step(self, batch: Any, chooser: StepThreads, i: int) -> float:
        """:meth:`step` on the thread count ``chooser`` gives the epoch's step ``i``, timed for it."""
        threads = chooser.threads(i)
        torch.set_num_threads(threads)
        started = time.perf_counter()
        loss = self.step(batch)
        chooser.record(i, threads, time.perf_counter() - started)
        return loss

    def _train_epoch(self, epoch: int) -> None:
        torch.manual_seed(int(np.random.SeedSequence([self.cfg.seed, epoch]).generate_state(1)[0]))
        t0 = time.perf_counter()
        self.model.train()
        self.objective.start_epoch(epoch)
        terms = getattr(self.objective, "loss_terms", None)  # a losses.WeightedSum: each term logged
        if terms is not None:
            terms.reset()
        self._sync_ranks()
        self._drop_stale_optimizer_state()
        batches = self.objective.batches(epoch)
        losses = []
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{self.cfg.epochs}", leave=False, unit="batch",
                   disable=None if self.cfg.progress and dist.is_main() else True)  # None: only on a terminal
        threads, chooser = self.step_threads, None
        if isinstance(threads, StepThreads):
            chooser, threads = threads, threads.chosen
            chooser.start_epoch(epoch, len(batches))
        with intra_op_threads(threads):
            for i, batch in enumerate(bar):
                losses.append(self.step(batch) if chooser is None else self._timed_step(batch, chooser, i))
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
        record: dict[str, Any] = {
            "epoch": epoch + 1,
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "lr": self.schedulers[0].get_last_lr()[0],
            "seconds": round(time.perf_counter() - t0, 3),
            **(terms.summary() if terms is not None else {}),
            **({"step_threads": chooser.chosen} if chooser is not None else {}),
            **self.objective.epoch_stats(),
        }
        due = (epoch + 1) % self.cfg.eval_every == 0 or epoch + 1 == self.cfg.epochs
        if self.evaluate is not None and due and dist.is_main():
            self.model.eval()
            threads = torch.get_num_threads()
            with torch.no_grad():
                metrics = self.evaluate()
            torch.set_num_threads(threads)  # numba's parallel metric kernels can change torch's thread count
            record["valid"] = metrics
            score = metrics[self.cfg.select_metric]
            if score > self.best_score:
                self.best_score, self.best_epoch = score, epoch
                self.best_state = copy.deepcopy(self.model.state_dict())
        self.history.append(record)
        if dist.is_main():
            log.info("epoch %d: %s", epoch + 1, json.dumps(record))
            if self._checkpoint_due(epoch):
                self._save_checkpoint(epoch)
            atomic_write_text(self.workdir / METRICS_LOG, "".join(json.dumps(r) + "\n" for r in self.history))
        dist.barrier()

    def _checkpoint_due(self, epoch: int) -> bool:
        """Whether the checkpoint is written after ``epoch``: every epoch, the last one, or once
        ``checkpoint_seconds`` have passed since the last checkpoint (or the start)."""
        wait = self.cfg.checkpoint_seconds
        return wait <= 0 or epoch + 1 == self.cfg.epochs or time.perf_counter() - self._last_checkpoint >= wait

    def _sync_ranks(self) -> None:
        """Give every rank rank 0's objective state (when the refresh hooks disagreed) and parameters.

        The hooks run on identical parameters, so they normally agree and only digests travel. Wrapping
        the model in DDP again after them broadcasts rank 0's parameters and buffers, and lets DDP see a
        table a hook resized (DEXA's re-clustered auxiliary vectors).
        """
        if not dist.is_distributed():
            return
        shapes = {name: tuple(t.shape) for name, t in [*self.model.named_parameters(), *self.model.named_buffers()]}
        state = self.objective.state_dict()
        if not dist.same_on_all_ranks((state, shapes)):
            log.warning("the refresh hooks gave the ranks different results; every rank takes rank 0's")
            self.objective.load_state_dict(dist.broadcast_object(state))
            kept = {k: v.cpu() for k, v in self.model.state_dict().items()} if dist.is_main() else None
            self.model.load_state_dict(dist.broadcast_object(kept))
        if self.averages_explicitly:
            dist.broadcast_module(self.model)
            return
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(ObjectiveModule(self.objective), device_ids=device_ids,
                                           static_graph=True, forward_sync_buffers=False)

    def _drop_stale_optimizer_state(self) -> None:
        """Forget the moments of a parameter a refresh hook resized (e.g. DEXA's re-clustered auxiliary table)."""
        for opt in self.optimizers:
            for p in [p for p, st in opt.state.items()
                      if any(torch.is_tensor(v) and v.ndim == p.ndim and v.shape != p.shape for v in st.values())]:
                del opt.state[p]

    # -- checkpoints -------------------------------------------------------------------------
    def _save_checkpoint(self, epoch: int) -> None:
        self._checkpoints.save(self.workdir / CHECKPOINT, {
            "epoch": epoch,
            "model": self.model.state_dict(),
            "optimizers": [o.state_dict() for o in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
            "objective": self.objective.state_dict(),
            "history": self.history,
            "best": (self.best_score, self.best_epoch, self.best_state),
        }, keep=("best",))  # the best state is a copy already, replaced whole at a new best
        self._last_checkpoint = time.perf_counter()

    def _load_checkpoint(self) -> int:
        """Rank 0 reads the checkpoint and hands it to the other ranks; returns the epoch to start at."""
        path = self.workdir / CHECKPOINT
        state = None
        if dist.is_main() and path.exists():
            state = load_checkpoint(path, "cpu" if dist.is_distributed() else self.device)
        state = dist.broadcast_object(state)
        if state is None:
            log.info("no checkpoint in %s: starting from scratch", self.workdir)
            return 0
        try:
            self.model.load_state_dict(state["model"])
            if len(state["optimizers"]) != len(self.optimizers) or len(state["schedulers"]) != len(self.schedulers):
                raise ValueError("other optimisers")
            for o, s in zip(self.optimizers, state["optimizers"], strict=True):
                o.load_state_dict(s)
            for sch, s in zip(self.schedulers, state["schedulers"], strict=True):
                sch.load_state_dict(s)
            self.objective.load_state_dict(state["objective"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            raise CheckpointError(f"{path}: the checkpoint does not fit this run's model ({str(e)[:300]}); delete "
                                  "it (or choose another --out) to start the run afresh") from None
        self.history = state["history"]
        self.best_score, self.best_epoch, self.best_state = state["best"]
        log.info("resumed from %s after epoch %d", path, state["epoch"] + 1)
        return state["epoch"] + 1
