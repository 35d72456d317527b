"""The ranking stage on the pipeline: trained on the bundled data without reading its test split, better than
either channel alone, saved and loaded, every channel reachable, added labels first for their own text."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest
from demo_models import DEMO_DEXML

from xdex.data import Split, load
from xdex.inference.model import DualEncoderModel
from xdex.methods.pipeline import train
from xdex.methods.ranker import rank_key, served
from xdex.methods.recipe import load_recipe
from xdex.metrics import compute_metrics, inverse_propensity, remove_pairs
from xdex.ranking.ranker import Ranker


@pytest.fixture(scope="module")
def demo():
    return load("demo")


@pytest.fixture(scope="module")
def model_dir(dexml_on_demo):
    """dexml with the packaged ranking stage, trained while the test split cannot be read."""
    return dexml_on_demo[1]


def first_documents(data, n: int):
    """``data`` with its first ``n`` training documents (a shorter training)."""
    return dataclasses.replace(data, train=Split(data.train.ids[:n], data.train.texts[:n], data.train.labels[:n]))


def scores(model: DualEncoderModel, demo) -> dict[str, float]:
    ranking = remove_pairs(model.predict(demo.test.texts, 10), demo.test.filter)
    return compute_metrics(ranking, demo.test.labels, (1, 5), inverse_propensity(demo.train.labels))


def test_fused_ranking_beats_each_channel_on_the_test_split(model_dir, demo):
    model = DualEncoderModel.load(model_dir)
    assert model.search == "fused" and model.search_modes[:3] == ("fused", "lexical", "dense")
    fused, lexical, dense = (scores(model.with_search(mode), demo) for mode in ("fused", "lexical", "dense"))
    assert fused["P@1"] > max(lexical["P@1"], dense["P@1"])
    assert fused["PSP@5"] > max(lexical["PSP@5"], dense["PSP@5"])
    assert fused["P@1"] > 68  # Omikuji's Parabel on TF-IDF: 70.6 (docs/benchmarks.md); this model trains 3 epochs


def test_the_model_records_cross_fitted_validation_figures(model_dir):
    figures = DualEncoderModel.load(model_dir).meta["ranker"]
    assert set(figures) == {"fused", "dense", "lexical"}
    assert figures["fused"]["P@1"] > max(figures["dense"]["P@1"], figures["lexical"]["P@1"])
    assert "PSP@5" in figures["fused"]


def test_saved_ranker_reads_back_and_predicts_the_same(model_dir, demo, tmp_path):
    model = DualEncoderModel.load(model_dir)
    texts = demo.test.texts[:50]
    model.save(tmp_path / "copy")
    again = DualEncoderModel.load(tmp_path / "copy")
    first, second = model.predict(texts, 10), again.predict(texts, 10)
    np.testing.assert_array_equal(first.indices, second.indices)
    np.testing.assert_array_equal(first.scores, second.scores)
    assert {p.name for p in (tmp_path / "copy" / "ranker").iterdir()} == {"ranker.json", "fusion.json", "prior.npy",
                                                                          "lexical"}


def test_a_damaged_fusion_file_is_refused_naming_it(model_dir, tmp_path):
    folder = shutil.copytree(model_dir, tmp_path / "model")
    (folder / "ranker" / "fusion.json").write_text("{}")
    with pytest.raises(ValueError, match="fusion.json"):
        DualEncoderModel.load(folder, verify=False)


def test_damaged_ranker_settings_are_refused_naming_the_file(model_dir, tmp_path):
    folder = shutil.copytree(model_dir, tmp_path / "model")
    settings = json.loads((folder / "ranker" / "ranker.json").read_text())
    (folder / "ranker" / "ranker.json").write_text(json.dumps(settings | {"served": "everything"}))
    with pytest.raises(ValueError, match="ranker.json: damaged settings"):
        Ranker.load(folder / "ranker", len(DualEncoderModel.load(model_dir).label_ids))


def test_labels_named_in_a_text_are_ranked_by_the_mention_channel(model_dir, demo):
    model = DualEncoderModel.load(model_dir)
    assert model.ranker.mention_candidates == 20 and model.channels.mentions.n_labels == len(model.label_ids)
    without = dataclasses.replace(model.ranker, mention_candidates=0)
    plain = dataclasses.replace(model, ranker=without, channels=None)
    assert plain.channels is None  # no channel, no index
    texts = demo.test.texts[:300]
    named = [set(model.channels.mentions.find(text)) for text in texts]
    with_channel, without_channel = model.predict(texts, 5).indices, plain.predict(texts, 5).indices
    share = [np.mean([len(set(row.tolist()) & found) / 5 for row, found in zip(ids, named, strict=True)])
             for ids in (with_channel, without_channel)]
    assert share[0] > share[1]  # on this data a document names most of its labels (README of the data)


def test_a_ranker_written_before_the_mention_channel_reads_without_it(model_dir, demo, tmp_path):
    folder = shutil.copytree(model_dir, tmp_path / "model")
    settings = json.loads((folder / "ranker" / "ranker.json").read_text())
    del settings["mention_candidates"]
    (folder / "ranker" / "ranker.json").write_text(json.dumps(settings))
    model = DualEncoderModel.load(model_dir)
    ranker = Ranker.load(folder / "ranker", len(model.label_ids))
    assert ranker.mention_candidates == 0
    model = dataclasses.replace(model, ranker=ranker, channels=None)
    assert model.channels is None
    assert (model.predict(demo.test.texts[:20], 5).indices >= 0).all()


def test_the_lexical_shortlist_is_searched_with_the_rankers_beam(model_dir, demo, tmp_path):
    """The stage's shortlist is Omikuji's search of width ``ranker.lexical_beam`` (10, recorded in ranker.json);
    a ranker.json written before the setting searched as wide as the shortlist, and still does."""
    model = DualEncoderModel.load(model_dir)
    ranker, texts = model.ranker, demo.test.texts[:40]
    assert ranker.lexical_beam == 10 and json.loads((model_dir / "ranker" / "ranker.json").read_text())[
        "lexical_beam"] == 10
    for beam in (10, 0):
        ids, scores = dataclasses.replace(ranker, lexical_beam=beam).lexical_shortlist(texts)
        expected = ranker.lexical.predict(texts, ranker.lexical_candidates, beam or ranker.lexical_candidates)
        np.testing.assert_array_equal(ids, expected[0])
        np.testing.assert_array_equal(scores, expected[1])
        assert (ids[:, -1] >= 0).all()  # a beam of 10 still fills a shortlist of 20
    folder = shutil.copytree(model_dir, tmp_path / "model")
    settings = json.loads((folder / "ranker" / "ranker.json").read_text())
    del settings["lexical_beam"]
    (folder / "ranker" / "ranker.json").write_text(json.dumps(settings))
    assert Ranker.load(folder / "ranker", len(model.label_ids)).lexical_beam == 0


def test_an_added_label_comes_first_for_its_own_text(model_dir):
    model = DualEncoderModel.load(model_dir)
    texts = ["quantum annealing scheduler", "a cooperative multitasking kernel for toasters"]
    extended = model.with_labels(texts, keys=["new-1", "new-2"])
    assert extended.search == "fused" and extended.channels.mentions.n_labels == len(model.label_ids) + 2
    ranking = extended.predict(texts, 5)
    n = len(model.label_ids)
    assert ranking.indices[:, 0].tolist() == [n, n + 1]


def test_the_dense_mode_is_the_network_alone(model_dir, demo):
    model = DualEncoderModel.load(model_dir)
    dense = model.with_search("dense")
    assert dense.ranker is None and dense.search == "de"
    expected = model.net.rank(demo.test.texts[:20], model.index, 5, added=model.added_vectors)
    np.testing.assert_array_equal(dense.predict(demo.test.texts[:20], 5).indices, expected.indices)
    with pytest.raises(ValueError, match="not one of this model's"):
        model.with_search("clf")


@pytest.mark.parametrize("setting, message", [
    ("ranker.dense_candidates=-1", ">= 0"),
    ("ranker.lexical_beam=-1", ">= 0"),
    ("ranker.lexical_candidates=0", "all 0"),
    ("ranker.lexical={\"classifier\": \"forest\"}", "ranker.lexical"),
])
def test_settings_the_stage_cannot_fit_are_refused_before_training(demo, tmp_path, setting, message):
    overrides = [*DEMO_DEXML, setting] + (["ranker.dense_candidates=0", "ranker.mention_candidates=0"]
                                          if "lexical_candidates" in setting else [])
    with pytest.raises(ValueError, match=message):
        train(demo, load_recipe("dexml", overrides=overrides), tmp_path / "model")
    assert not (tmp_path / "model" / "meta.json").exists()


def test_each_channel_can_be_left_out_by_config(demo, tmp_path):
    n = 1500  # a part of the training documents: four trainings
    demo = first_documents(demo, n)
    small = [*DEMO_DEXML[:2], "trainer.epochs=1", "data.validation_size=300",
             "ranker.lexical.classifier=omikuji-parabel"]  # the default's faster sibling: the ablation is the point
    without = train(demo, load_recipe("dexml", overrides=[*small, "ranker=null"]), tmp_path / "none")
    assert without.ranker is None and not (tmp_path / "none" / "ranker").exists()
    assert without.search == "de"
    lexical_only = train(demo, load_recipe("dexml", overrides=[*small, "ranker.dense_candidates=0",
                                                               "ranker.mention_candidates=0"]), tmp_path / "lexical")
    dense_only = train(demo, load_recipe("dexml", overrides=[*small, "ranker.lexical_candidates=0",
                                                             "ranker.mention_candidates=0",
                                                             "ranker.select_epoch=false",
                                                             "ranker.refit=false"]), tmp_path / "dense")
    mention_only = train(demo, load_recipe("dexml", overrides=[*small, "ranker.lexical_candidates=0",
                                                               "ranker.dense_candidates=0"]), tmp_path / "mention")
    labelled = int((np.diff(demo.train.labels.indptr) > 0).sum())  # training + validation documents
    assert lexical_only.ranker.lexical.training["documents"] == labelled  # refitted once the fusion was fitted
    assert dense_only.ranker.lexical.training["documents"] == labelled - 300  # kept as fitted before training
    texts = demo.test.texts[:30]
    lexical_ids = set(lexical_only.ranker.lexical.predict(texts, 100)[0].ravel()) - {-1}
    assert set(lexical_only.predict(texts, 10).indices.ravel()) - {-1} <= lexical_ids
    dense_ids = set(dense_only.with_search("dense").predict(texts, 100).indices.ravel()) - {-1}
    assert set(dense_only.predict(texts, 10).indices.ravel()) - {-1} <= dense_ids
    if mention_only.search == "fused":  # else a channel alone did better on validation
        for text, row in zip(texts, mention_only.predict(texts, 10).indices, strict=True):
            assert set(row.tolist()) - {-1} <= set(mention_only.channels.mentions.find(text))

    def validation_keys(folder):
        return set(json.loads((folder / "training" / "metrics.jsonl").read_text().splitlines()[-1])["valid"])
    assert "dense_P@1" in validation_keys(tmp_path / "lexical")  # the epoch was chosen on the fused ranking
    assert "dense_P@1" not in validation_keys(tmp_path / "dense")  # ... here on the network's own


def test_lexical_features_chosen_on_validation_documents(demo, tmp_path):
    """``analyzer: validation``: on the bundled data's long texts the rule gives words alone, so words + characters
    are fitted too, and the one whose lexical ranking of the validation documents is better is kept, refitted and
    recorded."""
    n = 500  # a part of the training documents: two lexical fits on the long texts
    part = first_documents(demo, n)
    overrides = ["trainer.epochs=1", "trainer.progress=false", "data.validation_size=150", "encoder.dim=32",
                 "ranker.lexical.analyzer=validation", "ranker.lexical.classifier=napkinxc-plt"]  # seeded, fast
    model = train(part, load_recipe("dexml", overrides=overrides), tmp_path / "model")
    record = model.meta["lexical_features"]
    figures = record["validation"]
    assert set(figures) == {"word", "word+char"} and all("P@1" in f for f in figures.values())
    better = max(figures, key=lambda name: rank_key(figures[name], "P@1"))
    if rank_key(figures["word"], "P@1") == rank_key(figures["word+char"], "P@1"):
        better = "word"  # a tie keeps the cheaper set
    assert record["kept"] == better
    assert "+".join(model.ranker.lexical.blocks) == better  # served, refitted with the same features
    assert DualEncoderModel.load(tmp_path / "model").meta["lexical_features"] == record


def test_the_refit_beside_the_training_gives_the_inline_refit(demo, tmp_path, monkeypatch, caplog):
    """A first lexical fit of at least ``BACKGROUND_REFIT_S`` has its refit run in a child process while the network
    trains: the model directory then holds the lexical channel an inline refit gives (napkinXC: seeded)."""
    from xdex.methods import ranker as stage

    n = 800
    part = first_documents(demo, n)
    recipe = load_recipe("dexml", overrides=["trainer.epochs=1", "trainer.progress=false", "data.validation_size=200",
                                             "encoder.dim=32", "ranker.lexical.classifier=napkinxc-plt"])
    models = {}
    for name, threshold in (("inline", float("inf")), ("background", 0.0)):
        monkeypatch.setattr(stage, "BACKGROUND_REFIT_S", threshold)
        with caplog.at_level(logging.INFO, logger="xdex.methods.ranker"):
            caplog.clear()
            models[name] = train(part, recipe, tmp_path / name)
        assert ("in a background process" in caplog.text) == (name == "background")
    inline, background = (models[name].ranker.lexical for name in ("inline", "background"))
    assert background._files == inline._files and background.config == inline.config
    assert background.training["documents"] == inline.training["documents"] == n  # training + validation
    files = {name: json.loads((tmp_path / name / "ranker" / "lexical" / "meta.json").read_text())["files"]
             for name in models}
    assert files["background"] == files["inline"]


def test_a_failed_background_refit_is_done_inline_and_the_training_ends(demo, tmp_path, monkeypatch, caplog):
    from xdex.methods import ranker as stage
    from xdex.ranking.background import BackgroundFit

    class Failing(BackgroundFit):
        def result(self):
            self.cancel()
            raise RuntimeError("the lexical fit in a background process failed (exit code 1): MemoryError")

    n = 600
    part = first_documents(demo, n)
    recipe = load_recipe("dexml", overrides=["trainer.epochs=1", "trainer.progress=false", "data.validation_size=150",
                                             "encoder.dim=32", "ranker.lexical.classifier=napkinxc-plt"])
    monkeypatch.setattr(stage, "BACKGROUND_REFIT_S", 0.0)
    monkeypatch.setattr(stage, "BackgroundFit", Failing)
    with caplog.at_level(logging.WARNING, logger="xdex.methods.ranker"):
        model = train(part, recipe, tmp_path / "model")
    assert "MemoryError; the lexical channel is refitted here instead" in caplog.text
    assert model.ranker.lexical.training["documents"] == n  # refitted inline on training + validation documents


def test_a_resumed_run_records_the_lexical_choice_it_made_before(demo, tmp_path, monkeypatch):
    from xdex.methods import pipeline

    n = 600
    part = first_documents(demo, n)
    recipe = load_recipe("dexml", overrides=["trainer.epochs=1", "trainer.progress=false", "data.validation_size=150",
                                             "encoder.dim=32", "ranker.lexical.analyzer=validation",
                                             "ranker.lexical.classifier=napkinxc-plt"])

    class Stopped(Exception):
        pass

    def stop(self, resume=False):
        raise Stopped  # the run ends once the lexical channel is fitted, before the network trains
    with monkeypatch.context() as patch:
        patch.setattr(pipeline.Trainer, "fit", stop)
        with pytest.raises(Stopped):
            train(part, recipe, tmp_path / "model")
    training = tmp_path / "model" / "training"
    record = json.loads((training / "lexical_features.json").read_text(encoding="utf-8"))
    assert set(record["validation"]) == {"word", "word+char"}
    model = train(part, recipe, tmp_path / "model", resume=True)
    assert model.meta["lexical_features"] == record
    assert "+".join(model.ranker.lexical.blocks) == record["kept"]
    assert not (training / "lexical_features.json").exists() and not (training / "lexical").exists()


def ranking_figures(fused, dense, lexical):
    return {name: {"P@1": p1, "P@3": p3} for name, (p1, p3) in
            (("fused", fused), ("dense", dense), ("lexical", lexical))}


def test_without_a_document_count_the_ranking_served_is_the_best_on_validation_ties_broken_by_the_next_precision():
    figures = ranking_figures
    assert served(figures((30, 20), (25, 21), (20, 19)), "P@1") == "fused"
    assert served(figures((25, 22), (25, 21), (20, 19)), "P@1") == "fused"  # a tie on P@1, P@3 decides
    assert served(figures((25, 20), (25, 21), (20, 19)), "P@1") == "dense"
    assert served(figures((20, 20), (25, 21), (26, 19)), "P@1") == "lexical"
    assert served(figures((20, 20), (25, 21), (25, 21)), "P@1") == "dense"  # all equal: the network's own


def test_a_channel_alone_is_served_only_when_it_beats_the_fused_ranking_by_more_than_the_sampling_noise():
    from xdex.methods.ranker import sampling_noise

    # one standard error of a 90% P@1 over 1,000 documents: 100 * sqrt(0.9 * 0.1 / 1000) = 0.9487 points
    assert sampling_noise(90.0, 1000) == pytest.approx(0.9487, abs=1e-4)
    assert sampling_noise(0.0, 1000) == 0.0 and sampling_noise(100.0, 10) == 0.0
    assert sampling_noise(50.0, 0) is None and sampling_noise(120.0, 10) is None
    figures = ranking_figures
    assert served(figures((90.0, 60), (80.0, 55), (90.9, 61)), "P@1", 1000) == "fused"  # 0.9 ahead: noise
    assert served(figures((90.0, 60), (80.0, 55), (91.0, 61)), "P@1", 1000) == "lexical"  # 1.0 > 0.95 ahead
    assert served(figures((90.0, 60), (80.0, 55), (91.0, 61)), "P@1", 100) == "fused"  # 9.5 points of noise
    assert served(figures((25.0, 20), (25.0, 21), (20.0, 19)), "P@1", 1000) == "fused"  # a tie: the fused one
    assert served(figures((20.0, 20), (26.0, 21), (26.0, 19)), "P@1", 1000) == "dense"  # channels tie: P@3
    assert served(figures((20.0, 20), (26.0, 21), (26.0, 21)), "P@1", 1000) == "dense"  # all equal: the network
