"""xdex.Model: train, load, predict (arrays and named labels), add labels, save, other search modes; and the
README's Python example, run as it is written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

import xdex
from xdex.data.synthetic import memorisation_task

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def task():
    return memorisation_task(n=300, length=6, vocab_size=300, seed=2)


@pytest.fixture(scope="module")
def trained(task, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "m"
    model = xdex.Model.train(task, recipe="unidec", out=out, trainer__epochs=3, data__validation_size=50,
                             overrides=["trainer.progress=false"], encoder__dim=32, heads__dim=16)
    return model, out


def test_train_gives_a_model_with_the_settings_asked_for(trained):
    model, out = trained
    assert isinstance(model, xdex.Model) and (out / "meta.json").is_file()
    assert model.config["trainer"]["epochs"] == 3 and model.config["encoder"]["dim"] == 32
    assert model.config["method"] == "unidec"


def test_predictions_are_arrays_and_named_labels(trained, task):
    model, _ = trained
    predictions = model.predict(task.test.texts[:5], k=4)
    assert isinstance(predictions, xdex.Predictions) and predictions.indices.shape == (5, 4)
    for row, scores, labels in zip(predictions.indices, predictions.scores, predictions.labels, strict=True):
        assert [label.index for label in labels] == row.tolist()
        assert [label.key for label in labels] == [model.label_ids[j] for j in row]
        assert [label.text for label in labels] == [model.label_texts[j] for j in row]
        np.testing.assert_allclose([label.score for label in labels], scores, rtol=1e-6)
    metrics = xdex.metrics.evaluate_predictions(model.predict(task.test.texts, k=5), task)  # takes Predictions
    assert set(metrics) >= {"P@1", "PSP@5"}


def test_load_add_labels_save_and_search_modes(trained, tmp_path):
    import shutil

    _, out = trained
    folder = Path(shutil.copytree(out, tmp_path / "copy"))
    model = xdex.Model.load(folder)
    assert isinstance(model, xdex.Model)
    keys = model.add_labels(["zebra quartz lantern"], keys=["new-1"])
    assert keys == ["new-1"] and model.label_ids[-1] == "new-1"
    assert model.channels is None or model.channels.n_labels == len(model.label_ids)  # they read the new text too
    assert model.predict(["zebra quartz lantern"], k=1).labels[0][0].key == "new-1"  # zero-shot: its own text
    model.save(folder)
    again = xdex.Model.load(folder)
    assert again.label_ids[-1] == "new-1" and again.label_texts[-1] == "zebra quartz lantern"
    de = again.with_search("de")
    served = again.ranker.served if again.ranker is not None else "concat"  # chosen on validation, else UniDEC's
    assert isinstance(de, xdex.Model) and de.search == "de" and again.search == served
    assert de.predict(["zebra quartz lantern"], k=1).labels[0][0].key == "new-1"


def test_train_needs_an_output_folder(task):
    with pytest.raises(ValueError, match="out="):
        xdex.Model.train(task, recipe="ngame")


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    block = re.search(r"## Python\n\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.group(1), str(README), "exec"), {})
    metrics = eval(printed.getvalue().splitlines()[0])  # the printed dict of metrics
    assert metrics["P@1"] > 45 and metrics["PSP@5"] > 20  # four epochs of DEXML on the demo data
    assert (tmp_path / "models" / "demo-dexml" / "added_labels.npz").is_file()
