"""`torchrun --nproc_per_node=2 -m xdex train` on the bundled demo data (gloo, one thread per process)."""

from __future__ import annotations

import json

import pytest
from torchrun_runner import torchrun_train

from xdex.data import load
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe

SETTINGS = ["trainer.epochs=2", "encoder.vocab_size=8000", "encoder.max_length=32", "classifiers.epochs=2",
            "ranker.lexical.classifier=napkinxc-plt",  # seeded: both runs fit the same lexical channel
            "ranker.lexical.word_ngrams=[1,1]", "ranker.lexical.max_features=10000", "ranker.refit=false"]  # fast


@pytest.mark.slow
def test_two_process_train_writes_one_model_directory_as_good_as_one_process(tmp_path):
    args = ["--method", "ngame", "--data", "demo", "--quiet"]
    for setting in SETTINGS:
        args += ["--set", setting]
    run, out = torchrun_train(args, tmp_path / "two", timeout=240)
    assert run.stdout.count("model written to") == 1  # rank 0 reports, the other rank is silent
    assert run.stderr.count("epoch 2:") == 2  # Module I and Module II, each logged by rank 0 alone
    assert run.stderr.count("the model serves its") == 1  # rank 0 fits the ranking stage
    meta = json.loads((out / "meta.json").read_text())
    records = (out / "training" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in records] == [1, 2]
    assert not (out / "training" / "checkpoint.pt").exists()
    assert not list(out.rglob("*.tmp"))

    one = train(load("demo"), load_recipe("ngame", overrides=SETTINGS + ["trainer.progress=false"]), tmp_path / "one")
    assert meta["n_train"] == one.meta["n_train"]
    assert abs(meta["validation"]["P@1"] - one.meta["validation"]["P@1"]) <= 1.0
