"""Recipes: a YAML config chooses the encoder, the loss, the batches and the trainer settings.

``train(dataset, config, out)`` is the one training entry point behind ``xdex train``: NGAME, DEXML,
DePSL, UniDEC and DEXA are configs (``configs/<method>.yaml``) of the same wiring, never a copy of the
training loop. A ``heads`` section adds UniDEC's DE head (and, with ``heads.classifier``, the
classifier head and per-label classifiers) on top of the encoder; an ``aux`` section adds DEXA's
auxiliary vectors to the label side, and a ``classifiers`` section DEXA's Module II after training.
An ``oak`` section hands training to OAK's three stages (linker, augmentation block, classifiers;
``methods/oak.py``), which share the run steps of ``methods/run.py`` and get this module's ``train`` and
``load_recipe`` handed in for the linker (so no module imports this one back).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import yaml

from xdex.config import ConfigError, apply_overrides, load_config, read_yaml
from xdex.data.dataset import Dataset
from xdex.encoders.factory import build_encoder
from xdex.index.retrieval import retrieve
from xdex.inference.model import DualEncoderModel
from xdex.losses import build_loss
from xdex.methods.dexa import build_aux, train_classifiers
from xdex.methods.full_label import FullLabelObjective
from xdex.methods.oak import train_oak
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.run import check_run_config, label_texts, split_validation, validation_filter, write_model
from xdex.methods.schema import RecipeConfig, renamed_settings
from xdex.methods.unidec import UniDECObjective
from xdex.metrics.measures import compute_metrics
from xdex.metrics.ranking import depth_with_filter, remove_pairs
from xdex.modules import DualEncoder, UniDECNet
from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.train import Trainer, TrainerConfig
from xdex.train.distributed import is_main, main_first
from xdex.train.run_folder import TRAINING, run_folder
from xdex.train.trainer import CHECKPOINT

log = logging.getLogger(__name__)

METHODS = ("ngame", "dexml", "depsl", "unidec", "dexa", "oak")
BASE = "base"  # configs/base.yaml: the defaults every method's recipe extends
FRESH_SECTIONS = {"encoder": "type", "loss": "name"}  # a recipe that changes these keys restarts the section
CLASSIFIERS = "classifiers"  # the training sub-folder of DEXA's Module II


def recipe_path(method: str) -> Path:
    """The packaged YAML recipe of ``method`` (``base`` names the defaults every recipe extends)."""
    if method not in (*METHODS, BASE):
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return Path(str(resources.files("xdex") / "configs" / f"{method}.yaml"))


def recipe_layers(method: str) -> dict:
    """The packaged defaults (``base.yaml``) with the method's recipe (``<method>.yaml``) laid over them."""
    def read(name: str) -> dict:
        return yaml.safe_load(recipe_path(name).read_text(encoding="utf-8")) or {}

    return _lay_over(read(BASE), read(method), fresh=FRESH_SECTIONS)


def load_recipe(method: str, path: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """The packaged defaults, the recipe of ``method``, then the user's YAML file, then ``key=value`` overrides.

    Sections merge key by key, except that another ``encoder.type`` starts the encoder section afresh (a
    transformer has none of a bag encoder's settings), and a method recipe that names another ``loss.name``
    than the defaults starts the loss section afresh.
    """
    recipe = recipe_layers(method)
    user = apply_overrides(read_yaml(path) if path is not None else {}, overrides or [])
    old = renamed_settings(user)
    if old:
        raise ConfigError("renamed settings: " + ", ".join(f"{a} is now {b}" for a, b in old))
    if _switches(recipe, user, "encoder", "type"):
        recipe["encoder"] = {}
    cfg = load_config(RecipeConfig, path, overrides, base=recipe)
    if cfg.method != method:
        raise ValueError(f"the config is for method {cfg.method!r} but --method is {method!r}")
    return cfg


def _switches(lower: dict, upper: dict, section: str, key: str) -> bool:
    """Whether ``upper`` names another ``section.key`` than ``lower`` (e.g. another encoder type)."""
    new, old = upper.get(section), lower.get(section)
    if not isinstance(new, dict):
        new = {}
    if not isinstance(old, dict):
        old = {}
    return key in new and new[key] != old.get(key)


def _lay_over(lower: dict, upper: dict, fresh: dict[str, str]) -> dict:
    """``upper`` merged into a copy of ``lower`` key by key; a section of ``fresh`` ({section: key}) whose key
    ``upper`` changes is taken from ``upper`` alone."""
    out = copy.deepcopy(lower)
    for section, value in upper.items():
        if isinstance(value, dict) and isinstance(out.get(section), dict):
            if section in fresh and _switches(out, upper, section, fresh[section]):
                out[section] = {}
            out[section] = _lay_over(out[section], value, fresh={})
        else:
            out[section] = value
    return out


def build_objective(
    config: RecipeConfig, encoder, queries, labels, y_train: sp.csr_matrix
) -> tuple[DualEncoder | UniDECNet, DualEncoderObjective]:
    """The network and trainer objective of ``config``: a plain dual encoder, or UniDEC / DePSL heads, with
    DEXA's auxiliary vectors on the label side when there is an ``aux`` section."""
    seed = config.trainer.seed
    loss = build_loss(**config.loss)
    heads = config.heads
    net: DualEncoder | UniDECNet
    if config.sampling.label_space == "full":  # DEXML-Full: every step scores all labels (gradient cache)
        if heads is not None or config.aux is not None:
            raise ValueError("sampling.label_space=full trains a plain dual encoder: remove the heads and aux sections")
        net = DualEncoder(encoder)
        return net, FullLabelObjective(net, loss, queries, labels, y_train, config.sampling, seed)
    if heads is not None and config.sampling.cache_negatives:
        raise ValueError("sampling.cache_negatives (embedding-cache negatives) needs a plain dual encoder, not heads")
    unidec: UniDECNet | None = None
    if heads is None:
        net = DualEncoder(encoder)
    else:
        n_labels = y_train.shape[1] if heads.classifier else None
        net = unidec = UniDECNet(encoder, heads.dim, n_labels, heads.dropout, search=heads.search)
    aux: AuxiliaryVectors | None = None
    recluster: Callable[[np.ndarray], np.ndarray] | None = None
    recluster_every = 0
    if config.aux is not None:
        aux, recluster = build_aux(config.aux, net, queries, labels, y_train, config.sampling.embed_batch_size, seed)
        recluster_every = config.aux.recluster_every
    if heads is None or unidec is None:  # a plain dual encoder
        return net, DualEncoderObjective(net, loss, queries, labels, y_train, config.sampling, seed, aux=aux,
                                         recluster=recluster, recluster_every=recluster_every)
    clf_loss = build_loss(**(heads.classifier_loss or config.loss)) if heads.classifier else None
    objective = UniDECObjective(unidec, loss, queries, labels, y_train, config.sampling, heads, clf_loss, seed=seed,
                                aux=aux, recluster=recluster, recluster_every=recluster_every)
    objective.init_classifiers()
    return net, objective


def trainer_settings(config: RecipeConfig) -> TrainerConfig:
    """The trainer settings of ``config``, with the auxiliary vectors' own learning rate (``aux.lr``)."""
    if config.aux is None or config.aux.lr is None:
        return config.trainer
    optim = dataclasses.replace(config.trainer.optim, group_lr={"aux.": config.aux.lr, **config.trainer.optim.group_lr})
    return dataclasses.replace(config.trainer, optim=optim)


def train(dataset: Dataset, config: RecipeConfig, out: str | Path, resume: bool = False) -> DualEncoderModel | None:
    """Train ``config`` on ``dataset``'s training split and write the model directory ``out``.

    Under torchrun every rank calls this; rank 0 writes ``out`` and returns the model, the others None.
    """
    out = Path(out)
    if config.classifiers is not None and config.heads is not None:
        raise ValueError("a `classifiers` section (DEXA Module II) needs a plain dual encoder; this recipe has "
                         "UniDEC heads, whose classifiers train with the encoder (remove one of the two sections)")
    with run_folder(out, resume):  # new, empty or an unfinished run of ours; an early failure leaves no trace
        if config.oak is not None:
            return train_oak(dataset, config, out, resume, load_recipe=load_recipe, train_recipe=train)
        return _train_recipe(dataset, config, out, resume)


def _train_recipe(dataset: Dataset, config: RecipeConfig, out: Path, resume: bool) -> DualEncoderModel | None:
    """:func:`train` for every recipe but OAK's."""
    workdir = out / TRAINING
    check_run_config(workdir / "config.yaml", config, resume)
    seed = config.trainer.seed
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    train_rows, valid_rows = split_validation(dataset.train, config.data.validation_size, seed)
    if len(train_rows) == 0:
        raise ValueError(f"{dataset.name}: no training document has a label; there is nothing to train on")
    y_all = dataset.train.labels
    y_train = y_all[train_rows]
    query_texts = [dataset.train.texts[i] for i in train_rows]
    lab_texts = label_texts(dataset.labels, config.data.label_text)
    encoder_cfg = {k: v for k, v in config.encoder.items() if v is not None}  # null = unset
    encoder = build_encoder(encoder_cfg, query_texts + lab_texts)
    cache = encoder.token_cache()  # shared by runs on the same texts ($XDEX_CACHE_DIR, default ~/.cache/xdex)
    with main_first():  # under torchrun rank 0 fills the token cache, then the other ranks read it
        queries, labels = cache.get(query_texts), cache.get(lab_texts)
    net, objective = build_objective(config, encoder, queries, labels, y_train)

    evaluate = None
    if len(valid_rows):
        with main_first():
            valid_tokens = cache.get([dataset.train.texts[i] for i in valid_rows])
        y_valid = y_all[valid_rows]
        pairs = validation_filter(dataset, valid_rows)
        k_max = depth_with_filter(max(config.data.eval_ks), pairs)

        def evaluate() -> dict[str, float]:
            z = net.label_vectors(labels, config.sampling.embed_batch_size).numpy()
            q = net.query_vectors(valid_tokens, config.sampling.embed_batch_size).numpy()
            ranking = retrieve(q, z, k_max)
            if pairs is not None:
                ranking = remove_pairs(ranking, pairs)
            return compute_metrics(ranking, y_valid, config.data.eval_ks)

    trainer = Trainer(objective, trainer_settings(config), workdir, evaluate=evaluate)
    trainer.fit(resume=resume)
    if config.classifiers is not None:
        assert isinstance(net, DualEncoder)  # checked first: classifiers need a plain dual encoder
        validation = (valid_tokens, y_valid, pairs) if len(valid_rows) else None
        net = train_classifiers(net, objective.aux, queries, labels, y_train, config.classifiers, config.trainer,
                                workdir / CLASSIFIERS, config.sampling.embed_batch_size, validation, resume)
    train_seconds = time.perf_counter() - t0
    if not is_main():  # rank 0 alone writes the model directory
        return None

    z = net.label_vectors(labels, config.sampling.embed_batch_size).numpy()
    model = write_model(out, net, z, lab_texts, dataset, config, trainer, len(train_rows), len(valid_rows),
                        train_seconds, [workdir / CHECKPOINT, workdir / CLASSIFIERS / CHECKPOINT])
    log.info("model written to %s (%.0f s)", out, train_seconds)
    return model
