"""UniDEC and DePSL end to end on the bundled demo: quality, the model directory, the CLIs and resume.

Quality bounds were measured over training seeds 0-7 with these settings (4 epochs): UniDEC test P@1 with
the concatenated search 56.5-60.2, the DE head alone 53.5-57.2, the classifiers alone 42.2-45.2, concat
PSP@5 28.6-30.9 (concat led the DE head by 1.5-3.0 points of P@1 on every seed); DePSL (3 epochs, seeds
0-3) P@1 53.9-55.8, PSP@5 28.4-28.7; the label-popularity baseline P@1 15.11, PSP@5 3.16. The thresholds
keep a wide margin below these; the one close comparison, concat >= the DE head, held on every seed.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numba
import numpy as np
import pytest
import torch
from ranking_asserts import assert_same_ranking
from safetensors.numpy import load_file
from typer.testing import CliRunner

import xdex.data
from xdex.cli import app
from xdex.data.bundled import resolve_source
from xdex.data.synthetic import memorisation_task
from xdex.inference.model import DualEncoderModel
from xdex.jsonfile import read_json
from xdex.methods.pipeline import train
from xdex.methods.popularity import PopularityBaseline
from xdex.methods.recipe import load_recipe
from xdex.metrics import Ranking, depth_with_filter, evaluate_predictions

runner = CliRunner()
FAST = ["trainer.epochs=4", "trainer.eval_every=2", "sampling.first_refresh=1", "sampling.refresh_every=2",
        "trainer.progress=false", "ranker=null"]  # the network alone (the ranking stage: test_ranker_stage.py)
DIM = 256  # heads.dim of the packaged recipes


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, the bag encoder's fastest setting (docs/benchmarks.md). numba's OpenMP pool, which
    the metrics use during validation, is set too: it shares torch's and would reset it to its own size."""
    saved = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    yield
    torch.set_num_threads(saved[0])
    numba.set_num_threads(saved[1])


@pytest.fixture(scope="module")
def demo():
    return xdex.data.load(resolve_source("demo"))


@pytest.fixture(scope="module")
def popularity(demo):
    ids, scores = PopularityBaseline().fit(demo.train.labels).predict(len(demo.test), 50)
    return evaluate_predictions(Ranking(ids, scores), demo)


@pytest.fixture(scope="module")
def unidec(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "unidec"
    return train(demo, load_recipe("unidec", overrides=FAST), out), out


@pytest.fixture(scope="module")
def depsl(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "depsl"
    overrides = [*FAST, "trainer.epochs=3", "trainer.eval_every=3"]  # DePSL P@1 53.9-55.8 over seeds 0-3
    return train(demo, load_recipe("depsl", overrides=overrides), out), out


def test_unidec_beats_popularity_by_far_and_concat_search_beats_each_head(demo, unidec, popularity):
    model, _ = unidec
    assert model.search == "concat"
    metrics = {mode: evaluate_predictions(model.with_search(mode).predict(demo.test.texts, 50), demo)
               for mode in ("concat", "de", "clf")}
    assert popularity["P@1"] == pytest.approx(15.11, abs=0.01)
    assert metrics["concat"]["P@1"] > 3 * popularity["P@1"]
    assert metrics["concat"]["PSP@5"] > 5 * popularity["PSP@5"]
    assert metrics["concat"]["P@1"] >= metrics["de"]["P@1"]  # Table 5: the sum of both cosines wins
    assert metrics["concat"]["P@1"] >= metrics["clf"]["P@1"] + 5
    assert metrics["clf"]["P@1"] > 2 * popularity["P@1"]  # the classifiers learned on their own too
    assert model.meta["validation"]["P@1"] > 45


def test_concat_search_vectors_are_the_de_and_classifier_vectors_side_by_side(demo, unidec):
    model, _ = unidec
    de, clf = model.with_search("de"), model.with_search("clf")
    assert model.label_embeddings.shape == (len(demo.labels), 2 * DIM)
    np.testing.assert_allclose(de.label_embeddings, model.label_embeddings[:, :DIM], atol=1e-6)
    np.testing.assert_allclose(clf.label_embeddings, model.label_embeddings[:, DIM:], atol=1e-6)
    texts = demo.test.texts[:20]
    q, q_de, q_clf = model.embed_texts(texts), de.embed_texts(texts), clf.embed_texts(texts)
    np.testing.assert_allclose(np.linalg.norm(q_de, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(q_clf, axis=1), 1, atol=1e-5)
    # score = cos(Φ_D(x), Φ_D(z)) + cos(Φ_C(x), Ψ) for every (text, label) pair
    np.testing.assert_allclose(q @ model.label_embeddings.T,
                               q_de @ de.label_embeddings.T + q_clf @ clf.label_embeddings.T, atol=1e-5)
    assert model.search == "concat"  # with_search left the model alone


def test_unidec_model_directory_reloads_and_predicts_the_same(demo, unidec):
    model, out = unidec
    assert sorted(p.name for p in out.iterdir()) == [  # README.md: the model card
        "README.md", "config.yaml", "encoder", "heads.json", "heads.safetensors", "index", "label_embeddings.npy",
        "labels.jsonl", "meta.json", "training"]
    assert read_json(out / "heads.json") == {
        "type": "unidec", "dim": DIM, "dropout": 0.1, "search": "concat", "n_labels": len(demo.labels)}
    again = DualEncoderModel.load(out)
    texts = demo.test.texts[:50]
    for mode in ("concat", "de", "clf"):
        a, b = model.with_search(mode).predict(texts, 10), again.with_search(mode).predict(texts, 10)
        assert_same_ranking(a.indices, a.scores, b.indices, b.scores)
    log = [json.loads(line) for line in (out / "training" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3, 4]
    assert all({"loss_de", "loss_clf", "avg_pool_size", "avg_positives_in_pool"} <= set(r) for r in log)
    assert all(r["avg_pool_size"] <= 256 * (2 + 3) for r in log)  # batch · (β + η)


def test_cli_evaluate_and_predict_on_a_unidec_model(demo, unidec, tmp_path):
    model, out = unidec
    result = runner.invoke(app, ["evaluate", str(out), "--data", "demo", "--json"])
    assert result.exit_code == 0, result.output
    cli_metrics = json.loads(result.output.strip().splitlines()[-1])
    depth = depth_with_filter(5, demo.test.filter)
    lib = evaluate_predictions(model.predict(demo.test.texts, max(10, depth) + 5), demo, recall_ks=(5, 10))
    for name in ("P@1", "P@5", "nDCG@5", "PSP@5", "R@10"):
        assert cli_metrics[name] == pytest.approx(lib[name], abs=1e-6), name

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo.test.texts[:20]))
    for search in ("concat", "clf"):
        preds = tmp_path / f"out-{search}.jsonl"
        result = runner.invoke(app, ["predict", str(out), "--input", str(src), "--output", str(preds), "--k", "5",
                                     "--search", search])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in preds.read_text().splitlines()]
        expected = model.with_search(search).predict(demo.test.texts[:20], 5)
        assert [r["id"] for r in rows] == list(range(20))
        assert [r["labels"] for r in rows] == expected.indices.tolist()
        np.testing.assert_allclose([r["scores"] for r in rows], expected.scores, atol=1e-5)


def test_depsl_trains_the_de_head_alone(demo, depsl, popularity, tmp_path):
    model, out = depsl
    metrics = evaluate_predictions(model.predict(demo.test.texts, 50), demo)
    assert metrics["P@1"] > 3 * popularity["P@1"]
    assert metrics["PSP@5"] > 5 * popularity["PSP@5"]
    assert read_json(out / "heads.json") == {"type": "unidec", "dim": DIM, "dropout": 0.1, "search": "de",
                                             "n_labels": None}
    assert sorted(load_file(str(out / "heads.safetensors"))) == ["de_head.0.bias", "de_head.0.weight"]
    assert model.label_embeddings.shape == (len(demo.labels), DIM)
    log = [json.loads(line) for line in (out / "training" / "metrics.jsonl").read_text().splitlines()]
    assert "loss_de" in log[-1] and "loss_clf" not in log[-1]
    for mode in ("concat", "clf"):
        with pytest.raises(ValueError, match="not one of this model's: de"):
            model.with_search(mode)
    src = tmp_path / "in.txt"
    src.write_text("unix\n")
    result = runner.invoke(app, ["predict", str(out), "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                                 "--search", "concat"])
    assert result.exit_code != 0 and "not one of this model's" in str(result.exception or result.output)
    again = DualEncoderModel.load(out)
    a, b = model.predict(demo.test.texts[:50], 10), again.predict(demo.test.texts[:50], 10)
    assert_same_ranking(a.indices, a.scores, b.indices, b.scores)


def _train_cmd(data, out, *extra):
    """6 short epochs; no validation, so the model kept is the last epoch's."""
    return [sys.executable, "-m", "xdex", "train", "--method", "unidec", "--data", str(data), "--out", str(out),
            "--quiet", "--set", "trainer.epochs=6", "--set", "sampling.first_refresh=1",
            "--set", "sampling.refresh_every=2", "--set", "sampling.batch_size=64", "--set", "encoder.dim=32",
            "--set", "heads.dim=32", "--set", "data.validation_size=0", *extra]


def test_resume_after_kill_equals_an_uninterrupted_run(tmp_path):
    data = tmp_path / "data"
    xdex.data.save(memorisation_task(n=2000, length=8, vocab_size=1000, seed=5), data, "jsonl")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}

    subprocess.run(_train_cmd(data, tmp_path / "full"), check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(data, killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = killed / "training" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 2):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "meta.json").exists()  # it really died before finishing
    assert (killed / "training" / "checkpoint.pt").exists()
    resumed = subprocess.run(_train_cmd(data, killed, "--resume"), check=True, env=env, capture_output=True, text=True)
    assert "resumed from" in resumed.stderr  # it went on from the checkpoint rather than starting afresh

    for name in ("encoder/model.safetensors", "heads.safetensors"):  # encoder, g1, g2 and Ψ
        a, b = load_file(str(tmp_path / "full" / name)), load_file(str(killed / name))
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=f"{name}: {key}")
    full_log = [json.loads(x) for x in (tmp_path / "full" / "training" / "metrics.jsonl").read_text().splitlines()]
    resumed_log = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(full_log) == len(resumed_log) == 6
    for key in ("loss", "loss_de", "loss_clf", "avg_pool_size", "avg_positives_in_pool"):
        assert [r[key] for r in resumed_log] == pytest.approx([r[key] for r in full_log], rel=1e-5), key
