"""The DEXML-Full recipe switch: `sampling.label_space=full` trains with every label in every step."""

from importlib import resources
from pathlib import Path

import pytest

from xdex.config import ConfigError
from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.methods.full_label import FullLabelObjective
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.pipeline import build_objective, train
from xdex.methods.recipe import load_recipe
from xdex.metrics import compute_metrics

FULL = Path(str(resources.files("xdex") / "configs" / "dexml-full.yaml"))
SMALL = ["encoder.dim=32", "encoder.vocab_size=2000", "trainer.progress=false", "data.validation_size=0"]


def test_packaged_dexml_full_config_selects_the_full_label_objective():
    cfg = load_recipe("dexml", FULL, SMALL)
    assert (cfg.sampling.label_space, cfg.sampling.hard_negatives) == ("full", 0)
    ds = memorisation_task(n=50, length=6, vocab_size=300, seed=1)
    encoder = build_encoder(cfg.encoder, ds.train.texts + ds.labels.texts)
    queries, labels = encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts)
    _, objective = build_objective(cfg, encoder, queries, labels, ds.train.labels)
    assert isinstance(objective, FullLabelObjective)
    pool = load_recipe("dexml", overrides=SMALL)
    assert type(build_objective(pool, encoder, queries, labels, ds.train.labels)[1]) is DualEncoderObjective


def test_dexml_full_memorises_random_pairs(tmp_path):
    ds = memorisation_task(n=400, length=8, vocab_size=2000, seed=0)
    cfg = load_recipe("dexml", FULL, [*SMALL, "trainer.epochs=6", "sampling.batch_size=64",
                                      "sampling.label_chunk=96"])
    model = train(ds, cfg, tmp_path / "model")
    metrics = compute_metrics(model.predict(ds.test.texts, 1), ds.test.labels, ks=(1,))
    assert metrics["P@1"] > 90  # chance is 0.25%


@pytest.mark.parametrize("overrides, message", [
    (["sampling.label_space=everything"], "not one of"),
    (["heads.dim=16"], "plain dual encoder"),
])
def test_full_label_space_rejects_what_it_cannot_train(tmp_path, overrides, message):
    ds = memorisation_task(n=30, length=6, vocab_size=300, seed=2)
    with pytest.raises((ConfigError, ValueError), match=message):
        train(ds, load_recipe("dexml", FULL, [*SMALL, *overrides]), tmp_path / "model")
