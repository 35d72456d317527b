"""End-to-end: train a recipe, save the model directory, predict and evaluate through the CLI."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from ranking_asserts import assert_same_ranking
from safetensors.numpy import load_file
from typer.testing import CliRunner

import xdex.data
from xdex.cli import app
from xdex.data.synthetic import memorisation_task
from xdex.inference.model import DualEncoderModel
from xdex.methods.pipeline import train
from xdex.methods.popularity import PopularityBaseline
from xdex.methods.recipe import load_recipe
from xdex.metrics import Ranking, depth_with_filter, evaluate_predictions

runner = CliRunner()


@pytest.fixture(scope="module")
def demo():
    return xdex.data.load("demo")


def test_dual_encoder_beats_popularity_by_far_on_the_bundled_data(demo, dexml_on_demo):
    model, _ = dexml_on_demo
    test = demo.test
    ids, scores = PopularityBaseline().fit(demo.train.labels).predict(len(test), 50)
    baseline = evaluate_predictions(Ranking(ids, scores), demo)
    metrics = evaluate_predictions(model.predict(test.texts, 50), demo)
    assert baseline["P@1"] == pytest.approx(15.11, abs=0.01)
    assert metrics["P@1"] > 2.5 * baseline["P@1"]  # the DE retrieves the linked entries, not just head labels
    assert metrics["PSP@5"] > 5 * baseline["PSP@5"]
    assert model.meta["validation"]["P@1"] > 30


def test_model_directory_predicts_the_same_after_reload(demo, dexml_on_demo):
    model, out = dexml_on_demo
    again = DualEncoderModel.load(out)
    texts = demo.test.texts[:50]
    a, b = model.predict(texts, 10), again.predict(texts, 10)
    assert_same_ranking(a.indices, a.scores, b.indices, b.scores)
    assert sorted(p.name for p in out.iterdir()) == [  # README.md: the model card
        "README.md", "config.yaml", "encoder", "index", "label_embeddings.npy", "labels.jsonl", "meta.json", "ranker",
        "training"]
    assert sorted(p.name for p in (out / "training").iterdir()) == ["config.yaml", "metrics.jsonl"]


def test_cli_evaluate_and_predict_agree_with_the_library(demo, dexml_on_demo, tmp_path):
    model, out = dexml_on_demo
    result = runner.invoke(app, ["evaluate", str(out), "--data", "demo", "--json"])
    assert result.exit_code == 0, result.output
    cli_metrics = json.loads(result.output.strip().splitlines()[-1])
    depth = depth_with_filter(5, demo.test.filter)
    lib_metrics = evaluate_predictions(model.predict(demo.test.texts, max(10, depth) + 5), demo, recall_ks=(5, 10))
    for name in ("P@1", "P@5", "nDCG@5", "PSP@5", "R@10"):
        assert cli_metrics[name] == pytest.approx(lib_metrics[name], abs=1e-6)

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo.test.texts[:20]))
    preds = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["predict", str(out), "--input", str(src), "--output", str(preds), "--k", "5"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    expected = model.predict(demo.test.texts[:20], 5)
    assert [r["id"] for r in rows] == list(range(20))
    assert [r["labels"] for r in rows] == expected.indices.tolist()


def test_training_refuses_to_overwrite_a_model(demo, dexml_on_demo):
    _, out = dexml_on_demo
    cfg = load_recipe("dexml", overrides=["trainer.epochs=1"])
    with pytest.raises(FileExistsError, match="another --out"):
        train(demo, cfg, out)
    with pytest.raises(FileExistsError, match="nothing to resume"):
        train(demo, cfg, out, resume=True)


def test_bad_config_key_is_named(tmp_path):
    result = runner.invoke(app, ["train", "--method", "ngame", "--data", "demo", "--out", str(tmp_path / "m"),
                                 "--set", "trainer.epochz=3"])
    assert result.exit_code != 0
    assert "trainer.epochz" in str(result.exception or result.output)


def _train_cmd(data, out, *extra):
    return [sys.executable, "-m", "xdex", "train", "--method", "ngame", "--data", str(data), "--out", str(out),
            "--quiet", "--set", "trainer.epochs=5", "--set", "sampling.first_refresh=1",
            "--set", "sampling.refresh_every=2", "--set", "sampling.batch_size=64",
            "--set", "data.validation_size=100", "--set", "trainer.eval_every=1",
            "--set", "ranker.lexical.classifier=napkinxc-plt", *extra]  # seeded (Omikuji is not): the same fusion


def test_resume_after_kill_equals_an_uninterrupted_run(tmp_path):
    data = tmp_path / "data"
    xdex.data.save(memorisation_task(n=3000, length=8, vocab_size=2000, seed=5), data, "jsonl")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    subprocess.run(_train_cmd(data, tmp_path / "full"), check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(data, killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = killed / "training" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "meta.json").exists()  # it really died before finishing
    subprocess.run(_train_cmd(data, killed, "--resume"), check=True, env=env, capture_output=True)

    a = load_file(str(tmp_path / "full" / "encoder" / "model.safetensors"))
    b = load_file(str(killed / "encoder" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)
    full_log = (tmp_path / "full" / "training" / "metrics.jsonl").read_text().splitlines()
    resumed_log = log.read_text().splitlines()
    assert [json.loads(x)["valid"] for x in full_log] == [json.loads(x)["valid"] for x in resumed_log]


def test_switching_encoder_type_starts_the_encoder_section_afresh(tmp_path):
    cfg = load_recipe("ngame", overrides=["encoder.type=transformer", "encoder.model_dir=/m"])
    assert cfg.encoder == {"type": "transformer", "model_dir": "/m"}
    path = tmp_path / "c.yaml"
    path.write_text("encoder:\n  dim: 64\n")
    assert load_recipe("ngame", path).encoder["dim"] == 64
    assert load_recipe("ngame", path).encoder["type"] == "bag"


@pytest.mark.parametrize("method", ["ngame", "dexml", "depsl", "unidec", "dexa"])
def test_paper_settings_load_and_name_the_missing_model(method):
    from xdex.methods.recipe import recipe_path

    path = recipe_path(method).with_name(f"{method}-paper.yaml")
    cfg = load_recipe(method, path, ["encoder.model_dir=/models/distilbert"])
    assert cfg.encoder["type"] == "transformer" and cfg.trainer.bf16
    with pytest.raises(ValueError, match="model_dir"):
        from xdex.encoders.factory import build_encoder

        build_encoder({k: v for k, v in load_recipe(method, path).encoder.items() if v is not None})


def test_dexa_paper_clusters_follow_the_label_count():
    """DEXA's 2^16 auxiliary vectors for the 131K labels of LF-AmazonTitles-131K are clusters of two labels, and
    the recipe keeps that ratio on data with fewer labels than 2^16, where a fixed K could not be used."""
    from xdex.methods.dexa import num_clusters
    from xdex.methods.recipe import recipe_path

    path = recipe_path("dexa").with_name("dexa-paper.yaml")
    aux = load_recipe("dexa", path, ["encoder.model_dir=/models/distilbert"]).aux
    assert num_clusters(aux, 131_073) == 2**16
    assert num_clusters(aux, 7_155) == 4_096  # 7,155 / 2 = 3,578: 4,096 is the nearest power of two


def test_resume_with_other_settings_is_refused(tmp_path):
    from xdex.methods.run import check_run_config

    path = tmp_path / "config.yaml"
    check_run_config(path, load_recipe("ngame"), resume=False)
    check_run_config(path, load_recipe("ngame", overrides=["trainer.progress=false"]), resume=True)
    with pytest.raises(ValueError, match=r"sampling\.batch_size, trainer\.epochs"):
        check_run_config(path, load_recipe("ngame", overrides=["trainer.epochs=3", "sampling.batch_size=8"]), True)


def test_documents_without_labels_are_left_out_of_training():
    import scipy.sparse as sp

    from xdex.data.dataset import Split
    from xdex.methods.run import split_validation

    # rows 1 and 3 have no label
    y = sp.csr_matrix(np.array([[1, 0], [0, 0], [0, 1], [0, 0], [1, 1], [0, 1]], dtype=np.float32))
    split = Split([str(i) for i in range(6)], ["t"] * 6, y)
    train_rows, valid_rows = split_validation(split, size=0, seed=0)
    assert train_rows.tolist() == [0, 2, 4, 5] and valid_rows.tolist() == []
    train_rows, valid_rows = split_validation(split, size=5, seed=0)  # at most a fifth of the labelled rows
    assert len(valid_rows) == 0 or set(valid_rows) <= {0, 2, 4, 5}
    assert not set(train_rows) & set(valid_rows) and set(train_rows) | set(valid_rows) == {0, 2, 4, 5}


def test_a_run_recorded_before_a_setting_existed_resumes_with_its_default(tmp_path):
    import yaml

    from xdex.methods.run import check_run_config

    path = tmp_path / "config.yaml"
    check_run_config(path, load_recipe("unidec"), resume=False)
    recorded = yaml.safe_load(path.read_text(encoding="utf-8"))
    del recorded["sampling"]["mining_index"]  # as an older xdex recorded it
    path.write_text(yaml.safe_dump(recorded), encoding="utf-8")
    check_run_config(path, load_recipe("unidec"), resume=True)
    with pytest.raises(ValueError, match=r"sampling\.mining_index\.kind"):
        check_run_config(path, load_recipe("unidec", overrides=["sampling.mining_index.kind=hnsw"]), resume=True)
