"""Two choices of the ranking stage, measured without a test split (docs/benchmarks.md, "Ranking stage: choices on
validation splits").

    python -m benchmarks.bench_ranker_choices features DATASET [--methods ngame unidec dexa] [--set KEY=VALUE]
    python -m benchmarks.bench_ranker_choices refit DATASET [--method dexml] [--set KEY=VALUE] [--json FILE]

``features``: each recipe trained once; its validation candidates scored by the cross-fitted fusion with every
feature, without each head's score (``Network.head_scores``), without the log-scale lexical features (a
left-out feature is set to 0 for every candidate, which the standardised fit then ignores), without the mention
channel (its candidates and its features) and with the lexical shortlist searched as wide as it is long (Omikuji's
beam 20 instead of ``ranker.lexical_beam``); with ``--set ranker.encoder=minilm``, also without the encoder channel.

``refit``: 1,000 training documents held out as a stand-in test set (seed 7), the recipe trained on the rest
(holding out its own validation documents); for each lexical classifier the fusion is fitted on the validation
documents with the channel fitted without them, then the stand-in test set is scored with that channel and with one
refitted on the training and validation documents.
Prints one line per measurement and writes them to ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import data_root
from xdex.data import load
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.methods.pipeline import train
from xdex.methods.plugin import Validation
from xdex.methods.ranker import cross_fitted
from xdex.methods.recipe import load_recipe
from xdex.methods.run import held_out_as_test, split_validation, validation_filter
from xdex.metrics.evaluation import evaluate_predictions
from xdex.metrics.propensity import inverse_propensity
from xdex.metrics.ranking import depth_with_filter
from xdex.ranking.fusion import FEATURES, Candidates, LogisticFusion
from xdex.ranking.lexical import LexicalConfig, LexicalModel

log = logging.getLogger("bench_ranker_choices")
OVERRIDES = ["trainer.progress=false", "ranker.refit=false"]  # the validation documents stay unseen
CLASSIFIERS: dict[str, dict[str, object]] = {"Bonsai, 3 trees": {"trees": 3}, "Bonsai, 1 tree": {"trees": 1},
               "Parabel, 1 tree": {"classifier": "omikuji-parabel", "trees": 1},
               "Bonsai, 1 tree, words + characters": {"trees": 1, "analyzer": "word+char"}}


def trained(dataset: Dataset, method: str, overrides: list[str]) -> tuple:
    """A model of the recipe trained on ``dataset`` (its validation documents unseen by the lexical channel), its
    config, and its fitted rows, validation rows and validation labels as the pipeline held them out."""
    config = load_recipe(method, overrides=[*OVERRIDES, *overrides])
    with tempfile.TemporaryDirectory() as folder:
        model = train(dataset, config, Path(folder) / "model")
    assert model is not None and model.ranker is not None
    fitted, rows = split_validation(dataset.train, config.data.validation_size, config.trainer.seed)
    rows, labels = held_out_as_test(dataset.train.labels, fitted, rows)
    return model, config, fitted, rows, labels


WITHOUT_MENTIONS = "without the mention channel"
WITHOUT_ENCODER = "without the encoder channel"
WIDE_BEAM = "lexical beam = shortlist size"
ABLATIONS = {"every feature": (), "without the head scores": ("de", "clf"),
             "without the log-scale lexical scores": ("log_lexical", "log_lexical_gap")}


def candidates_of(model, ranker, texts: list[str], queries: np.ndarray) -> Candidates:
    """The candidates of ``texts`` by ``ranker`` on ``model``'s network, its text channels over the catalogue."""
    return ranker.candidates(texts, queries, model.index, model._label_vectors, heads=model.net.head_scores,
                             channels=ranker.text_channels(model.label_texts))


def features(dataset: Dataset, methods: list[str], overrides: list[str]) -> dict:
    """Cross-fitted validation figures of the fused ranking with every feature and without some, per recipe."""
    out = {}
    for method in methods:
        model, config, train_rows, rows, labels = trained(dataset, method, overrides)
        texts = [dataset.train.texts[i] for i in rows]
        pairs = validation_filter(dataset, rows)
        valid = Validation(rows, texts, model.net.encoder.tokenize(texts), labels, pairs,
                           depth_with_filter(max(config.data.eval_ks), pairs))
        queries = model.embed_texts(texts)
        figures = {}
        found = candidates_of(model, model.ranker, texts, queries)
        sources = {WITHOUT_MENTIONS: candidates_of(model, dataclasses.replace(model.ranker, mention_candidates=0),
                                                   texts, queries),
                   WIDE_BEAM: candidates_of(model, dataclasses.replace(model.ranker, lexical_beam=0), texts, queries)}
        if model.ranker.encoder is not None:  # trained with ranker.encoder: the fusion without that channel too
            sources[WITHOUT_ENCODER] = candidates_of(
                model, dataclasses.replace(model.ranker, encoder=None, encoder_candidates=0), texts, queries)
        for name, left_out in {**ABLATIONS, **dict.fromkeys(sources, ())}.items():
            source = sources.get(name, found)
            ablated = Candidates(source.ids, source.features.copy())
            ablated.features[..., [FEATURES.index(feature) for feature in left_out]] = 0.0
            figures[name] = cross_fitted(ablated, valid, config.data.eval_ks, config.section("ranker").fusion_c,
                                         config.trainer.seed, inverse_propensity(dataset.train.labels[train_rows]),
                                         config.section("ranker").fusion)
            log.info("%s %s %s: fused P@1 %.2f PSP@5 %.2f", dataset.name, method, name,
                     figures[name]["fused"]["P@1"], figures[name]["fused"]["PSP@5"])
        out[method] = figures
    return out


def _rows(split: Split, rows: np.ndarray, columns: np.ndarray) -> Split:
    def pick(matrix, by_label=False):
        return None if matrix is None else (matrix[rows][:, columns] if by_label else matrix[rows])

    return Split([split.ids[i] for i in rows], [split.texts[i] for i in rows], pick(split.labels, True),
                 pick(split.akp), pick(split.filter, True), pick(split.features))


def stand_in_dataset(dataset: Dataset, size: int = 1000, seed: int = 7) -> Dataset:
    """``size`` training documents held out as a test split is built: the label set is the labels of the other
    training documents, a held-out document keeps those and is dropped when none is left."""
    rest, held = split_validation(dataset.train, size, seed)
    columns = np.flatnonzero(np.diff(dataset.train.labels[rest].tocsc().indptr) > 0)
    if dataset.train.filter is None and dataset.test is not None and dataset.test.filter is not None:
        dataset = Dataset(dataset.name, Split(dataset.train.ids, dataset.train.texts, dataset.train.labels,
                                              dataset.train.akp, validation_filter(dataset, np.arange(len(
                                                  dataset.train))), dataset.train.features),
                          dataset.labels, dataset.test, dataset.akp_items, dataset.meta)
    stand_in = _rows(dataset.train, held, columns)
    kept = np.flatnonzero(np.diff(stand_in.labels.indptr) > 0)
    labels = Catalogue([dataset.labels.ids[j] for j in columns], [dataset.labels.texts[j] for j in columns],
                       None if dataset.labels.descs is None else [dataset.labels.descs[j] for j in columns])
    return Dataset(dataset.name, _rows(dataset.train, rest, columns), labels,
                   _rows(stand_in, kept, np.arange(len(columns))), dataset.akp_items, dataset.meta)


def refit(dataset: Dataset, method: str, overrides: list[str], classifiers: list[str]) -> dict:
    """Stand-in test figures of the fused ranking and the lexical channel, before and after the refit."""
    nested = stand_in_dataset(dataset)
    stand_in = nested.test
    assert stand_in is not None
    model, config, fitted, rows, valid_labels = trained(nested, method, overrides)
    valid_texts = [nested.train.texts[i] for i in rows]
    ranker, test_texts = model.ranker, stand_in.texts
    valid_queries = model.embed_texts(valid_texts)

    def scores() -> dict[str, dict[str, float]]:  # the model's own modes: the ranker object they share is refitted
        return {mode: evaluate_predictions(model.with_search(mode).predict(test_texts, 10), nested)
                for mode in ("fused", "lexical")}

    out: dict = {"dense": evaluate_predictions(model.with_search("dense").predict(test_texts, 10), nested)}
    for name in classifiers:
        settings = CLASSIFIERS[name]
        lexical_config = LexicalConfig.from_dict({"seed": 0, **settings})
        start = time.perf_counter()
        ranker.lexical = LexicalModel(lexical_config).fit([nested.train.texts[i] for i in fitted],
                                                          nested.train.labels[fitted])
        fit_seconds = time.perf_counter() - start
        ranker.fusion = LogisticFusion.fit(ranker.candidates(valid_texts, valid_queries, model.index,
                                                             model._label_vectors, heads=model.net.head_scores),
                                           valid_labels, config.section("ranker").fusion_c,
                                           config.section("ranker").fusion)
        before = scores()
        ranker.lexical = ranker.lexical.refit(nested.train.texts, nested.train.labels)
        after = scores()
        out[name] = {"fit_s": round(fit_seconds, 1), "before": before, "after": after}
        log.info("%s %s: fit %.1f s; fused P@1 %.2f -> %.2f, PSP@5 %.2f -> %.2f; lexical P@1 %.2f -> %.2f",
                 dataset.name, name, fit_seconds, before["fused"]["P@1"], after["fused"]["P@1"],
                 before["fused"]["PSP@5"], after["fused"]["PSP@5"], before["lexical"]["P@1"],
                 after["lexical"]["P@1"])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("choice", choices=("features", "refit"))
    parser.add_argument("dataset", help="a dataset folder under the data root, or demo")
    parser.add_argument("--methods", nargs="+", default=["ngame", "unidec", "dexa"], help="recipes (features)")
    parser.add_argument("--method", default="dexml", help="recipe (refit)")
    parser.add_argument("--lexical", nargs="+", choices=list(CLASSIFIERS), default=list(CLASSIFIERS)[:3],
                        help="lexical classifiers (refit)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("xdex", "omikuji"):
        logging.getLogger(name).setLevel(logging.WARNING)
    dataset = load(args.dataset if args.dataset == "demo" else data_root() / args.dataset)
    result = (features(dataset, args.methods, args.set) if args.choice == "features" else
              refit(dataset, args.method, args.set, args.lexical))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
