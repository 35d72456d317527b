"""Recipes: a YAML config chooses the encoder, the loss, the batches and the trainer settings.

``train(dataset, config, out)`` is the one training entry point behind ``xdex train``: NGAME, DEXML,
DePSL, UniDEC and DEXA are configs (``configs/<method>.yaml``) of the same wiring, never a copy of the
training loop. A ``heads`` section adds UniDEC's DE head (and, with ``heads.classifier``, the
classifier head and per-label classifiers) on top of the encoder; an ``aux`` section adds DEXA's
auxiliary vectors to the label side, and a ``classifiers`` section DEXA's Module II after training.
An ``oak`` section hands training to OAK's three stages (linker, augmentation block, classifiers;
``methods/oak.py``), which reuse this module's pieces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import platform
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
import yaml

from xdex import __version__
from xdex.atomic import atomic_write_text
from xdex.config import apply_overrides, load_config, read_yaml, to_dict
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.encoders.factory import build_encoder
from xdex.index import build_index
from xdex.inference.model import DualEncoderModel
from xdex.inference.retrieval import retrieve
from xdex.losses import build_loss
from xdex.methods.dexa import AuxConfig, ClassifierConfig, build_aux, train_classifiers
from xdex.methods.full_label import FullLabelObjective
from xdex.methods.oak import OakConfig, train_oak
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.unidec import HeadsConfig, UniDECObjective
from xdex.metrics.measures import compute_metrics
from xdex.metrics.ranking import depth_with_filter, remove_pairs
from xdex.modules import DualEncoder, UniDECNet
from xdex.train import Trainer, TrainerConfig
from xdex.train.distributed import is_main, main_first
from xdex.train.run_folder import TRAINING, run_folder
from xdex.train.trainer import CHECKPOINT

log = logging.getLogger(__name__)

METHODS = ("ngame", "dexml", "depsl", "unidec", "dexa", "oak")
CLASSIFIERS = "classifiers"  # the training sub-folder of DEXA's Module II


@dataclass
class DataConfig:
    label_text: Literal["text", "text+desc"] = "text"  # what the label side of the encoder reads
    validation_size: int = 1000  # training documents held out for model selection (0: none)
    eval_ks: list[int] = field(default_factory=lambda: [1, 3, 5])


@dataclass
class RecipeConfig:
    method: str = "ngame"
    encoder: dict = field(default_factory=lambda: {"type": "bag", "dim": 256})
    loss: dict = field(default_factory=lambda: {"name": "triplet"})
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    index: dict = field(default_factory=lambda: {"kind": "exact"})
    heads: HeadsConfig | None = None  # UniDEC / DePSL heads; None: the encoder's output is the embedding
    aux: AuxConfig | None = None  # DEXA Module I: auxiliary vectors for label clusters
    classifiers: ClassifierConfig | None = None  # DEXA Module II: per-label classifiers, fused scores
    oak: OakConfig | None = None  # OAK: linker, AK bank and combiner, refined classifiers (three stages)


def recipe_path(method: str) -> Path:
    """The packaged YAML recipe of ``method``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return Path(str(resources.files("xdex") / "configs" / f"{method}.yaml"))


def load_recipe(method: str, path: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """The packaged recipe of ``method``, then the user's YAML file, then ``key=value`` overrides.

    Sections merge key by key, except that choosing another ``encoder.type`` starts the encoder
    section afresh (a transformer has none of a bag encoder's settings).
    """
    base = yaml.safe_load(recipe_path(method).read_text(encoding="utf-8"))
    user = apply_overrides(read_yaml(path) if path is not None else {}, overrides or [])
    user_encoder = user.get("encoder") if isinstance(user.get("encoder"), dict) else {}
    if "type" in user_encoder and user_encoder["type"] != base["encoder"].get("type"):
        base["encoder"] = {}
    cfg = load_config(RecipeConfig, path, overrides, base=base)
    if cfg.method != method:
        raise ValueError(f"the config is for method {cfg.method!r} but --method is {method!r}")
    return cfg


def split_validation(train: Split, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ids (training, validation): ``size`` random labelled documents held out for model selection; the
    other labelled documents train (documents without labels are left out)."""
    labelled = np.flatnonzero(np.diff(train.labels.indptr) > 0)
    size = min(size, len(labelled) // 5)
    rng = np.random.default_rng([seed, 17])
    valid = np.sort(rng.choice(labelled, size=size, replace=False)) if size > 0 else np.zeros(0, np.int64)
    keep = np.setdiff1d(labelled, valid)  # a document without labels has no positive to train on
    return keep, valid


def validation_filter(dataset: Dataset, rows: np.ndarray) -> sp.csr_matrix | None:
    """Filter pairs for held-out training rows, so validation is scored like the test split.

    The training split's own filter pairs when it has them; otherwise, when the test split has filter
    pairs (a same-universe dataset, where a document can be the very entry a label stands for), the
    pairs of a document and the label with the same id.
    """
    n_labels = len(dataset.labels)
    if dataset.train.filter is not None:
        return dataset.train.filter[rows]
    if dataset.test is None or dataset.test.filter is None:
        return None
    position = {key: j for j, key in enumerate(dataset.labels.ids)}
    pairs = [(i, position[dataset.train.ids[r]]) for i, r in enumerate(rows) if dataset.train.ids[r] in position]
    r, c = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return sp.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(len(rows), n_labels))


def label_texts(labels: Catalogue, mode: str) -> list[str]:
    if mode == "text+desc" and labels.descs is not None:
        return [f"{t} {d}".strip() for t, d in zip(labels.texts, labels.descs)]
    return list(labels.texts)


def data_fingerprint(dataset: Dataset) -> str:
    h = hashlib.sha256()
    for text in dataset.train.texts:
        h.update(text.encode("utf-8") + b"\0")
    h.update(dataset.train.labels.indices.tobytes() + dataset.train.labels.indptr.tobytes())
    for text in dataset.labels.texts:
        h.update(text.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def check_run_config(path: Path, config: RecipeConfig, resume: bool) -> None:
    """Record the config a run starts with; a resumed run must use the same one (progress bars aside)."""
    current = to_dict(config)
    current["trainer"].pop("progress")
    if resume and path.exists():
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
        changed = sorted(_changed_keys(saved, current))
        if changed:
            raise ValueError(f"{path}: the run was started with other settings ({', '.join(changed)}); "
                             "resume it with the same --config and --set")
        return
    if is_main():
        atomic_write_text(path, yaml.safe_dump(current, sort_keys=False))


def _changed_keys(a: object, b: object, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in set(a) | set(b) for k in _changed_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def build_objective(
    config: RecipeConfig, encoder, queries, labels, y_train: sp.csr_matrix
) -> tuple[DualEncoder | UniDECNet, DualEncoderObjective]:
    """The network and trainer objective of ``config``: a plain dual encoder, or UniDEC / DePSL heads, with
    DEXA's auxiliary vectors on the label side when there is an ``aux`` section."""
    seed = config.trainer.seed
    loss = build_loss(**config.loss)
    heads = config.heads
    if config.sampling.label_space == "full":  # DEXML-Full: every step scores all labels (gradient cache)
        if heads is not None or config.aux is not None:
            raise ValueError("sampling.label_space=full trains a plain dual encoder: remove the heads and aux sections")
        net = DualEncoder(encoder)
        return net, FullLabelObjective(net, loss, queries, labels, y_train, config.sampling, seed)
    if heads is not None and config.sampling.cache_negatives:
        raise ValueError("sampling.cache_negatives (embedding-cache negatives) needs a plain dual encoder, not heads")
    if heads is None:
        net = DualEncoder(encoder)
    else:
        n_labels = y_train.shape[1] if heads.classifier else None
        net = UniDECNet(encoder, heads.dim, n_labels, heads.dropout, search=heads.search)
    aux_options = {}
    if config.aux is not None:
        aux, recluster = build_aux(config.aux, net, queries, labels, y_train, config.sampling.embed_batch_size, seed)
        aux_options = {"aux": aux, "recluster": recluster, "recluster_every": config.aux.recluster_every}
    if heads is None:
        return net, DualEncoderObjective(net, loss, queries, labels, y_train, config.sampling, seed, **aux_options)
    clf_loss = build_loss(**(heads.classifier_loss or config.loss)) if heads.classifier else None
    objective = UniDECObjective(net, loss, queries, labels, y_train, config.sampling, heads, clf_loss, seed=seed,
                                **aux_options)
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
            return train_oak(dataset, config, out, resume)
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


def write_model(
    out: Path, net, label_vectors: np.ndarray, lab_texts: list[str], dataset: Dataset, config: RecipeConfig,
    trainer: Trainer, n_train: int, n_valid: int, train_seconds: float, checkpoints: list[Path],
    extra_meta: dict | None = None,
) -> DualEncoderModel:
    """Index the trained label vectors, record the training metadata and write the model directory ``out``;
    the finished run's ``checkpoints`` are removed (only an unfinished run needs them; the metrics logs stay)."""
    index_params = dict(config.index)
    index = build_index(index_params.pop("kind", "exact"), label_vectors.shape[1], "ip", **index_params)
    index.add(label_vectors)
    selected = trainer.best_state is not None
    meta = {
        "xdex_version": __version__,
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "method": config.method,
        "dataset": dataset.name,
        "data_fingerprint": data_fingerprint(dataset),
        "n_train": int(n_train),
        "n_validation": int(n_valid),
        "n_labels": len(dataset.labels),
        "train_seconds": round(train_seconds, 1),
        "best_epoch": trainer.best_epoch + 1 if selected else len(trainer.history),
        "validation": trainer.history[trainer.best_epoch]["valid"] if selected else None,
        **(extra_meta or {}),
    }
    net.to("cpu")  # a model directory loads on the CPU; predictors move it where they run
    model = DualEncoderModel(net, list(dataset.labels.ids), lab_texts, label_vectors, index, to_dict(config), meta)
    model.save(out)
    for done in checkpoints:
        done.unlink(missing_ok=True)
    return model

