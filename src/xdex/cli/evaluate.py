"""`xdex evaluate`: metrics of a trained model, or of a prediction file, on a dataset's test split.

The metrics come from :func:`xdex.metrics.evaluate_predictions`, which every way of producing
a ranking shares; this module gets the ranking (by predicting with the model, or by reading the
file) and prints the result.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scipy.sparse as sp
import typer

import xdex.data
from xdex.data.dataset import Catalogue, Dataset
from xdex.metrics import (
    DEFAULT_KS,
    DEFAULT_RECALL_KS,
    Ranking,
    decile_contributions,
    depth_with_filter,
    evaluate_predictions,
    format_metrics,
    parse_propensity,
    plot_deciles,
    read_predictions,
)
from xdex.metrics.evaluation import filtered, require_test

if TYPE_CHECKING:
    from xdex.inference.model import DualEncoderModel

logger = logging.getLogger(__name__)

DATA_HELP = "Dataset folder (any supported layout), or 'demo' for the bundled dataset."
SEARCH_HELP = ("Rank with one part of the model: lexical (the ranking stage's TF-IDF channel alone), dense (the "
               "network's own ranking, without the ranking stage), de (label embeddings alone) or clf "
               "(classifiers alone); the default is the model's own: fused (the ranking stage, every channel), or "
               "for a model without one concat for UniDEC (both heads), fused for DEXA.")
DEVICE_HELP = ("Where the network embeds the texts: auto (a GPU where there is one), cpu, cuda or cuda:N; the "
               "label search and the ranking stage run on the CPU.")


def parse_ks(text: str, option: str) -> list[int]:
    """Sorted distinct positive integers from a comma-separated list such as "1,3,5"."""
    try:
        ks = sorted({int(part) for part in text.split(",")})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"{option}: expected comma-separated positive integers such as 1,3,5, got {text!r}")
    return ks


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)


def evaluate(
    model_dir: Path | None = typer.Argument(None, help="Model directory written by `xdex train`."),
    pred: Path | None = typer.Option(
        None, "--pred", help="Instead of a model: predictions for the test split, .jsonl[.gz], .npz or .txt."),
    data: str = typer.Option(..., "--data", help=DATA_HELP),
    k: str = typer.Option(",".join(map(str, DEFAULT_KS)), "--k", help="k of P@k, nDCG@k, PSP@k and PSnDCG@k."),
    recall_k: str = typer.Option(",".join(map(str, DEFAULT_RECALL_KS)), "--recall-k", help="k of R@k."),
    propensity: str = typer.Option(
        "default", "--propensity", help="Propensity model: default | amazon | wikipedia | A,B | none."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: metric name -> percent."),
    deciles: Path | None = typer.Option(
        None, "--deciles", help="Write a plot of each label decile's share of P@k (largest --k) to this file."),
    search: str | None = typer.Option(
        None, "--search", help=SEARCH_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    record: bool = typer.Option(
        False, "--record", help="Also add the metrics to MODEL_DIR's model card (README.md), replacing those of an "
        "earlier --record on the same data and search mode; the model's files are not touched."),
) -> None:
    """Test-split metrics of MODEL_DIR or of --pred FILE (filter pairs removed from the predictions)."""
    if (model_dir is None) == (pred is None):
        raise ValueError("give either a MODEL_DIR or --pred FILE (exactly one)")
    if record and model_dir is None:
        raise ValueError("--record adds the metrics to a model's card: give a MODEL_DIR, not --pred")
    ks, recall_ks = parse_ks(k, "--k"), parse_ks(recall_k, "--recall-k")
    model = None if propensity.strip().lower() == "none" else parse_propensity(propensity)
    dataset = xdex.data.load(data)
    test = require_test(dataset)
    depth = _depth(dataset, ks + recall_ks)
    if pred is not None:
        ranking = read_predictions(pred, len(test), dataset.n_labels, k=depth)
    else:
        assert model_dir is not None  # exactly one of the two, checked above
        trained = _load_model(model_dir, dataset, search, device)
        ranking = trained.predict(test.texts, depth)
        evaluated = dataset
        dataset = _with_unused_labels(dataset, int(ranking.indices.max(initial=-1)) + 1)
    metrics = evaluate_predictions(ranking, dataset, ks, model, recall_ks)
    typer.echo(json.dumps(metrics) if as_json else format_metrics(metrics))
    if record:
        assert model_dir is not None  # checked above
        _record(model_dir, trained, evaluated, metrics, search)
    if deciles is not None:
        _plot_deciles(ranking, dataset, max(ks), deciles, echo=not as_json)


def _load_model(model_dir: Path, dataset: Dataset, search: str | None, device: str) -> DualEncoderModel:
    """The model in ``model_dir`` ranking with ``search`` and embedding on ``device``, after checking that it was
    trained on these labels."""
    from xdex.inference.model import DualEncoderModel

    trained = DualEncoderModel.load(model_dir).to(device)
    if search is not None:
        trained = trained.with_search(search)
    if list(trained.label_ids[: trained.n_trained]) != list(dataset.labels.ids):
        raise ValueError(
            f"{model_dir} was trained on {trained.n_trained} labels that are not the "
            f"{dataset.n_labels} labels of {dataset.name} (ids differ)"
        )
    return trained


def _record(model_dir: Path, model: DualEncoderModel, dataset: Dataset, metrics: dict[str, float],
            search: str | None) -> None:
    """Add ``metrics`` to the model card of ``model_dir`` (xdex.inference.card), with the command that made them;
    ``search``: the mode asked for (None: the model's own)."""
    from xdex.inference.card import record_evaluation
    from xdex.methods.run import data_fingerprint

    served = model.ranker.served if model.ranker is not None else None
    path = record_evaluation(model_dir, model.meta, dataset=dataset.name, fingerprint=data_fingerprint(dataset),
                             n_test=len(require_test(dataset)), search=search or model.search, metrics=metrics,
                             argv=["xdex", *sys.argv[1:]], served=served)
    logger.info("recorded the test metrics in %s", path)


def _with_unused_labels(dataset: Dataset, n_labels: int) -> Dataset:
    """``dataset`` with labels up to ``n_labels`` that no document has (those added to a model after training):
    a prediction of one is a miss."""
    extra = n_labels - dataset.n_labels
    if extra <= 0:
        return dataset

    def widen(m: sp.csr_matrix) -> sp.csr_matrix:
        return sp.hstack([m, sp.csr_matrix((m.shape[0], extra), dtype=m.dtype)], format="csr")

    labels = dataset.labels
    descs = None if labels.descs is None else [*labels.descs, *[""] * extra]
    catalogue = Catalogue([*labels.ids, *(f"(added {j})" for j in range(dataset.n_labels, n_labels))],
                          [*labels.texts, *[""] * extra], descs)
    splits: dict[str, Any] = {
        name: dataclasses.replace(split, labels=widen(split.labels),
                                  filter=None if split.filter is None else widen(split.filter))
        for name, split in dataset.splits().items()}
    return dataclasses.replace(dataset, labels=catalogue, **splits)


def _depth(dataset: Dataset, ks: list[int]) -> int:
    """Predictions to keep per row: the largest k plus the most filter pairs of any test row."""
    return depth_with_filter(max(ks), require_test(dataset).filter)


def _plot_deciles(ranking: Ranking, dataset: Dataset, k: int, path: Path, echo: bool) -> None:
    test = require_test(dataset)
    report = decile_contributions(filtered(ranking, test), test.labels, dataset.train.labels, k=k)
    plot_deciles(report, path, title=f"{dataset.name}: P@{k} = {report.precision:.2f}% by label decile")
    logger.info("wrote the decile plot to %s", path)
    if echo:
        typer.echo(f"\nshare of P@{k} by label decile (1 = most training documents, equal training volume):")
        typer.echo(f"{'decile':>6} {'labels':>8} {'train pairs':>12} {f'P@{k}':>8}")
        for b, share in enumerate(report.contributions):
            typer.echo(f"{b + 1:>6} {report.labels_per_bin[b]:>8} {report.train_pairs_per_bin[b]:>12} {share:8.2f}")
