"""The one training pipeline: every recipe, whatever its method, runs these steps.

    run config -> validation split -> [before_encoder stages] -> encoder and token cache -> network and
    objective (a plug-in's ``build``, else a plain dual encoder) -> [before_fit stages] -> trainer fit, the
    best epoch chosen on validation -> [after_fit stages] -> label index and model directory

NGAME, DEXML and DePSL are recipes of the plain steps; UniDEC, DEXA, DEXML-Full and OAK add what they need
through their plug-ins (``methods/plugin.py``; OAK: the linker before, the augmentation block as network and
objective, the refined classifiers after).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import scipy.sparse as sp
import torch

from xdex.data.dataset import Dataset
from xdex.encoders.base import Encoder
from xdex.encoders.factory import build_encoder
from xdex.hardware import resolve_device
from xdex.inference.model import DualEncoderModel
from xdex.losses import build_loss
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.plugin import Plugin, Run, Validation, active_plugins
from xdex.methods.run import (
    check_run_config,
    held_out_as_test,
    label_texts,
    split_validation,
    validation_filter,
    validation_metrics,
    write_model,
)
from xdex.methods.schema import RecipeConfig
from xdex.metrics.ranking import depth_with_filter
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.network import Network
from xdex.text.tokens import TokenizedTexts
from xdex.train import Objective, Trainer, TrainerConfig
from xdex.train.distributed import is_distributed, is_main, main_first
from xdex.train.run_folder import TRAINING, run_folder
from xdex.train.threads import training_step_threads
from xdex.train.trainer import CHECKPOINT

log = logging.getLogger(__name__)


def train(dataset: Dataset, config: RecipeConfig, out: str | Path, resume: bool = False) -> DualEncoderModel | None:
    """Train ``config`` on ``dataset``'s training split and write the model directory ``out``.

    Under torchrun every rank calls this; rank 0 writes ``out`` and returns the model, the others None.
    """
    out = Path(out)
    plugins = active_plugins(config)  # their checks refuse what they cannot train, before anything runs
    with run_folder(out, resume):  # new, empty or an unfinished run of ours; an early failure leaves no trace
        return _train(dataset, config, out, resume, plugins)


def _train(dataset: Dataset, config: RecipeConfig, out: Path, resume: bool, plugins: list[Plugin]
           ) -> DualEncoderModel | None:
    workdir = out / TRAINING
    check_run_config(workdir / "config.yaml", config, resume)
    t0 = time.perf_counter()
    seed = config.trainer.seed
    train_rows, valid_rows = split_validation(dataset.train, config.data.validation_size, seed)
    valid_rows, valid_labels = held_out_as_test(dataset.train.labels, train_rows, valid_rows)
    if len(train_rows) == 0:
        raise ValueError(f"{dataset.name}: no training document has a label; there is nothing to train on")
    run = Run(config, dataset.train.labels[train_rows], [dataset.train.texts[i] for i in train_rows],
              label_texts(dataset.labels, config.data.label_text), dataset=dataset, out=out, workdir=workdir,
              resume=resume, train_rows=train_rows, train_recipe=train)
    for plugin in plugins:
        for stage in plugin.before_encoder:
            stage(run)

    torch.manual_seed(seed)
    encoder_cfg = {k: v for k, v in config.encoder.items() if v is not None}  # null = unset
    run.encoder = encoder = build_encoder(encoder_cfg, run.query_texts + run.label_texts + run.vocabulary_texts,
                                          documents=run.query_texts)
    log.info("encoder reads up to %d tokens per text", encoder.max_length)
    cache = encoder.token_cache()  # shared by runs on the same texts ($XDEX_CACHE_DIR, default ~/.cache/xdex)
    with main_first():  # under torchrun rank 0 fills the token cache, then the other ranks read it
        run.queries, run.labels = cache.get(run.query_texts), cache.get(run.label_texts)
        if len(valid_rows):
            texts = [dataset.train.texts[i] for i in valid_rows]
            pairs = validation_filter(dataset, valid_rows)
            run.validation = Validation(valid_rows, texts, cache.get(texts), valid_labels, pairs,
                                        depth_with_filter(max(config.data.eval_ks), pairs))

    objective = _build(run, plugins)
    settings = trainer_settings(config, plugins)
    threads = training_step_threads(encoder, resolve_device(settings.device, "trainer.device"), is_distributed())
    run.trainer = Trainer(objective, settings, workdir, evaluate=_evaluator(run), step_threads=threads)
    run.trainer.fit(resume=resume)
    for plugin in plugins:
        for stage in plugin.after_fit:
            stage(run)
    train_seconds = time.perf_counter() - t0
    if not is_main():  # rank 0 alone writes the model directory
        return None

    assert run.net is not None  # built above; an after_fit stage may have replaced it
    net = run.net.to("cpu")  # a model directory loads on the CPU; predictors move it where they run
    z = net.label_vectors(run.labels, config.sampling.embed_batch_size).numpy()
    model = write_model(out, net, z, run.label_texts, dataset, config, run.trainer, len(train_rows),
                        len(valid_rows), train_seconds, [workdir / CHECKPOINT, *run.checkpoints], run.meta,
                        run.ranker)
    log.info("model written to %s (%.0f s)", out, train_seconds)
    return model


def _build(run: Run, plugins: list[Plugin]) -> Objective:
    """The network and objective of ``run``: the building plug-in's (else a dual encoder's), then the
    ``before_fit`` stages. Returns the objective."""
    builders = [p.build for p in plugins if p.build is not None]
    run.net, objective = builders[0](run) if builders else dual_encoder(run)
    run.objective = objective
    for plugin in plugins:
        for stage in plugin.before_fit:
            stage(run)
    return objective


def build_objective(config: RecipeConfig, encoder: Encoder, queries: TokenizedTexts, labels: TokenizedTexts,
                    train_labels: sp.csr_matrix) -> tuple[Network, Objective]:
    """The network and trainer objective ``config`` trains, outside a training run (benchmarks, tests): what
    :func:`train` builds after the encoder, for recipes whose plug-ins need no run folder (all but OAK)."""
    run = Run(config, train_labels, [], [], encoder=encoder, queries=queries, labels=labels)
    objective = _build(run, active_plugins(config))
    assert run.net is not None  # built by _build
    return run.net, objective


def dual_encoder(run: Run) -> tuple[Network, Objective]:
    """The plain steps' network and objective: a dual encoder under NGAME's batches and the recipe's loss."""
    encoder, queries, labels = run.inputs()
    config = run.config
    loss = build_loss(**config.loss)
    net = DualEncoder(encoder)
    objective = DualEncoderObjective(net, loss, queries, labels, run.train_labels, config.sampling,
                                     config.trainer.seed)
    return net, objective


def trainer_settings(config: RecipeConfig, plugins: list[Plugin] | None = None) -> TrainerConfig:
    """The recipe's trainer settings with its plug-ins' own learning-rate groups (the recipe's own win)."""
    groups: dict[str, float] = {}
    for plugin in active_plugins(config) if plugins is None else plugins:
        if plugin.lr_groups is not None:
            groups.update(plugin.lr_groups(config))
    if not groups:
        return config.trainer
    optim = dataclasses.replace(config.trainer.optim, group_lr={**groups, **config.trainer.optim.group_lr})
    return dataclasses.replace(config.trainer, optim=optim)


def _evaluator(run: Run):
    """The validation metrics of the network being trained (None without a validation split)."""
    valid = run.validation
    if valid is None:
        return None
    batch = run.config.sampling.embed_batch_size

    def evaluate() -> dict[str, float]:
        assert run.net is not None and run.labels is not None
        if run.validation_labels is not None:
            z = run.validation_labels()
        else:
            z = run.net.label_vectors(run.labels, batch).numpy()
        if run.validation_queries is not None:
            q = run.validation_queries()
        else:
            q = run.net.query_vectors(valid.tokens, batch).numpy()
        if run.validation_scorer is not None:  # the ranking stage: the ranking the model will serve
            return run.validation_scorer(q, z)
        return validation_metrics(q, z, valid, run.config.data.eval_ks)

    return evaluate
