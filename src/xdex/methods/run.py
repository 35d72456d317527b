"""The steps every training run shares, whatever its method: the validation split, the label side's texts,
the run's recorded settings and the writing of the model directory."""

from __future__ import annotations

import hashlib
import platform
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
import yaml

from xdex import __version__
from xdex.atomic import atomic_write_text
from xdex.config import ConfigError, to_dict
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.index import build_index
from xdex.index.retrieval import retrieve
from xdex.inference.card import write_card
from xdex.inference.model import DualEncoderModel
from xdex.methods.schema import RecipeConfig, upgrade_names
from xdex.metrics.measures import compute_metrics
from xdex.metrics.ranking import Ranking, remove_pairs
from xdex.train import Trainer
from xdex.train.distributed import is_main

if TYPE_CHECKING:
    from xdex.methods.plugin import Validation
    from xdex.methods.schema import RecipeConfig
    from xdex.ranking.ranker import Ranker


def validation_metrics(q: np.ndarray, z: np.ndarray, valid: Validation, ks: list[int]) -> dict[str, float]:
    """Metrics of the inner-product ranking of validation query vectors ``q`` against label vectors ``z`` (the
    network's own ranking), the validation filter pairs removed."""
    return ranking_metrics(retrieve(np.ascontiguousarray(q), z, valid.depth), valid, ks)


def ranking_metrics(ranking: Ranking, valid: Validation, ks: list[int],
                    inv_propensity: np.ndarray | None = None) -> dict[str, float]:
    """Metrics of a ranking of the validation documents (PSP@k too, given the labels' inverse propensities), their
    filter pairs removed first, as every ranking is scored."""
    if valid.pairs is not None:
        ranking = remove_pairs(ranking, valid.pairs)
    return compute_metrics(ranking, valid.labels, ks, inv_propensity)


def split_validation(train: Split, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ids (training, validation): ``size`` random labelled documents held out for model selection; the
    other labelled documents train (documents without labels are left out)."""
    labelled = np.flatnonzero(np.diff(train.labels.indptr) > 0)
    size = min(size, len(labelled) // 5)
    rng = np.random.default_rng([seed, 17])
    valid = np.sort(rng.choice(labelled, size=size, replace=False)) if size > 0 else np.zeros(0, np.int64)
    keep = np.setdiff1d(labelled, valid)  # a document without labels has no positive to train on
    return keep, valid


def held_out_as_test(labels: sp.csr_matrix, train_rows: np.ndarray, valid_rows: np.ndarray
                         ) -> tuple[np.ndarray, sp.csr_matrix]:
    """The validation rows and their labels, held out as a test split is built (``labels``: the training split's).

    Where every label of the catalogue has a training document, the label set was drawn from the training split
    (as in the Extreme Classification Repository's datasets and the shared ones), and a test document keeps only
    labels that have training documents. A validation document is then held out the same way: it keeps the labels
    that the fitted rows have, and one left without labels is dropped. Otherwise (labels without training
    documents exist) the validation labels are kept whole, and so they are where fewer than half of the validation
    documents would keep a label (labels that are rarely shared, as in a memorisation task: the held-out labels
    are then what validation is about). Held out as is, a label whose only documents are validation documents
    has no training documents yet is relevant: the fusion learnt there that a label never seen in training is
    likely relevant, which is never so on a test split of such a dataset.
    """
    y = sp.csr_matrix(labels)
    whole = valid_rows, y[valid_rows]
    if not (np.diff(y.tocsc().indptr) > 0).all():
        return whole
    seen = (np.diff(y[train_rows].tocsc().indptr) > 0).astype(y.dtype)
    held = sp.csr_matrix(y[valid_rows] @ sp.diags(seen))
    held.eliminate_zeros()
    keep = np.diff(held.indptr) > 0
    if 2 * keep.sum() < len(valid_rows):
        return whole
    return valid_rows[keep], held[keep]


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
        return [f"{t} {d}".strip() for t, d in zip(labels.texts, labels.descs, strict=True)]
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
        if isinstance(saved, dict):  # a run started by an older xdex: its settings under their new names, and
            saved = _with_defaults(upgrade_names(saved))  # the settings added since at their defaults
        changed = sorted(_changed_keys(saved, current))
        if changed:
            raise ValueError(f"{path}: the run was started with other settings ({', '.join(changed)}); "
                             "resume it with the same --config and --set")
        return
    if is_main():
        atomic_write_text(path, yaml.safe_dump(current, sort_keys=False))


def _with_defaults(saved: dict) -> dict:
    """A recorded run config with every setting it lacks at its default (a run started before the setting existed
    ran as its default does); as it is where it does not read as a recipe."""
    try:
        full = to_dict(RecipeConfig.from_dict(saved))
    except (ConfigError, TypeError):
        return saved
    full["trainer"].pop("progress", None)
    return full


def _changed_keys(a: object, b: object, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in set(a) | set(b) for k in _changed_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


_COMMAND: ContextVar[list[str] | None] = ContextVar("xdex_command", default=None)


@contextmanager
def recorded_command(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, the models written record ``argv`` (e.g. ``["xdex", "train", ...]``) as the command that
    made them (``meta.json``'s "command", shown in the model card); elsewhere they record none."""
    token = _COMMAND.set(list(argv))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def write_model(
    out: Path, net, label_vectors: np.ndarray, lab_texts: list[str], dataset: Dataset, config: RecipeConfig,
    trainer: Trainer, n_train: int, n_valid: int, train_seconds: float, checkpoints: list[Path],
    extra_meta: dict | None = None, ranker: Ranker | None = None,
) -> DualEncoderModel:
    """Index the trained label vectors, record the training metadata and write the model directory ``out`` with its
    card (``README.md``, :mod:`xdex.inference.card`); the finished run's ``checkpoints`` are removed (only an
    unfinished run needs them; the metrics logs stay)."""
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
        "command": _COMMAND.get(),  # None: trained from Python
        **(extra_meta or {}),
    }
    net.to("cpu")  # a model directory loads on the CPU; predictors move it where they run
    model = DualEncoderModel(net, list(dataset.labels.ids), lab_texts, label_vectors, index, to_dict(config), meta,
                             ranker=ranker)
    model.save(out, owned=True)  # train/run_folder.py checked that out is this run's
    write_card(out, meta, ranker.served if ranker is not None else None)  # outside meta.json's file list
    for done in checkpoints:
        if done.is_dir():
            shutil.rmtree(done)
        else:
            done.unlink(missing_ok=True)
    return model

