"""The model card, MODEL_DIR/README.md: written with the model (recipe, data fingerprint, counts, validation metrics,
ranking stage, the command), completed by `xdex evaluate --record`, and never part of the checksummed files."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys

import pytest
from cli_runner import xdex_cli

import xdex.data
from xdex.cli import main
from xdex.inference.card import CARD, TEST_BEGIN, TEST_END
from xdex.inference.model import MARKER, DualEncoderModel

VALIDATED = ["trainer.epochs=1", "trainer.eval_every=1", "trainer.progress=false", "data.validation_size=16",
             "encoder.dim=16", "encoder.vocab_size=300", "sampling.batch_size=16"]  # conftest's TINY, validated


@pytest.fixture(scope="module")
def cli_model(toy, tmp_path_factory):
    """A tiny model trained by `xdex train` on the toy data saved as a folder, with a validation split (so that
    its card has validation metrics and a ranking stage): (data folder, model directory, train arguments).

    Each document holds its label's text, so that the ranking stage's lexical channel finds it and its fusion
    can be fitted."""
    root = tmp_path_factory.mktemp("card")
    labels = toy.train.labels.tocsr()
    texts = [f"{' '.join(toy.labels.texts[j] for j in labels[i].indices)} {t}" for i, t in enumerate(toy.train.texts)]
    data = dataclasses.replace(toy, train=dataclasses.replace(toy.train, texts=texts),
                               test=dataclasses.replace(toy.test, texts=list(texts)))
    xdex.data.save(data, root / "data", layout="jsonl")
    args = ["train", "--method", "ngame", "--data", str(root / "data"), "--out", str(root / "model"), "--quiet"]
    for setting in VALIDATED:
        args += ["--set", setting]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["xdex", *args])
        try:
            main()
        except SystemExit as e:
            assert e.code in (0, None)
    return root / "data", root / "model", args


def table_value(card: str, metric: str) -> str:
    """The cell of ``metric`` (e.g. "P@3") in the card's first table that has it."""
    measure, k = metric.rsplit("@", 1)
    for block in card.split("\n\n"):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("| metric |"):
            continue
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] == measure and f"@{k}" in header:
                return cells[header.index(f"@{k}")]
    raise AssertionError(f"{metric} is not in the card")


def meta_of(folder) -> dict:
    return json.loads((folder / MARKER).read_text(encoding="utf-8"))


def test_the_card_names_what_made_the_model(cli_model):
    data, model, args = cli_model
    card, meta = (model / CARD).read_text(encoding="utf-8"), meta_of(model)
    assert card.startswith(f"# ngame model trained on {meta['dataset']}\n")
    assert "| recipe | `ngame` |" in card and f"| dataset | `{meta['dataset']}` |" in card
    assert f"`{meta['data_fingerprint']}`" in card
    assert f"| labels | {meta['n_labels']} |" in card and f"| training documents | {meta['n_train']} |" in card
    assert f"| validation documents | {meta['n_validation']} |" in card and meta["n_validation"] > 0
    assert f"| training time | {meta['train_seconds']:.1f} s |" in card
    assert f"| selected epoch | {meta['best_epoch']} |" in card
    for metric, value in meta["validation"].items():  # the selected epoch's
        assert table_value(card, metric) == f"{value:.2f}"
    served = json.loads((model / "ranker" / "ranker.json").read_text())["served"]
    assert f"| ranking served | {served}: " in card
    assert meta["command"] == ["xdex", *args]
    assert f"```sh\nxdex train --method ngame --data {data} --out {model} --quiet --set" in card
    assert f"{TEST_BEGIN}\nNo evaluation recorded yet" in card


def test_the_card_is_outside_the_checksums_and_the_model_still_loads(cli_model, tmp_path):
    _, model, _ = cli_model
    assert CARD not in meta_of(model)["files"]
    DualEncoderModel.load(model, verify=True)
    copy = shutil.copytree(model, tmp_path / "copy")
    (copy / CARD).write_text("# my own notes\n", encoding="utf-8")  # editing the card touches nothing else
    DualEncoderModel.load(copy, verify=True)


def test_a_model_trained_from_python_says_so(trained):
    card = (trained["ngame"] / CARD).read_text(encoding="utf-8")
    assert meta_of(trained["ngame"])["command"] is None
    assert "Trained from Python (the xdex API), not from the command line" in card
    assert "None: the model was trained without a validation split." in card  # TINY: no validation
    assert "| ranking served | none: the network's own ranking (no ranking stage) |" in card


def test_evaluate_record_adds_the_test_metrics_and_keeps_the_model_valid(cli_model, tmp_path, monkeypatch, capsys):
    data, original, _ = cli_model
    model = shutil.copytree(original, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file() and p.name != CARD}
    code, out, _ = xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--json")
    assert code == 0
    assert "xdex:evaluation" not in (model / CARD).read_text(encoding="utf-8")  # only when asked
    code, out, _ = xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--json", "--record")
    assert code == 0
    metrics = json.loads(out)
    card = (model / CARD).read_text(encoding="utf-8")
    section = card[card.index(TEST_BEGIN): card.index(TEST_END)]
    assert "No evaluation recorded yet" not in section
    for metric, value in metrics.items():
        assert table_value(section, metric) == f"{value:.2f}"
    meta = meta_of(model)
    assert f"data fingerprint `{meta['data_fingerprint']}` (the training data's)" in section
    assert f"```sh\nxdex evaluate {model} --data {data} --json --record\n```" in section
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file() and p.name != CARD} == before
    DualEncoderModel.load(model, verify=True)

    # recorded again: replaced; another search mode: a block of its own; edits elsewhere are kept
    (model / CARD).write_text(card.replace("## Command", "My note.\n\n## Command"), encoding="utf-8")
    assert xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--record")[0] == 0
    assert xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--record", "--search", "dense")[0] == 0
    card = (model / CARD).read_text(encoding="utf-8")
    served = DualEncoderModel.load(model).search
    assert card.count(f'search="{served}" -->') == 1 and card.count('search="dense" -->') == 1
    assert card.count("<!-- /xdex:evaluation -->") == 2 and "My note.\n\n## Command" in card
    assert card.count(TEST_BEGIN) == 1 and card.count(TEST_END) == 1


def test_record_appends_to_a_hand_written_card_and_needs_a_model(cli_model, tmp_path, monkeypatch, capsys):
    data, original, _ = cli_model
    model = shutil.copytree(original, tmp_path / "model")
    (model / CARD).write_text("# Our model\n\nWritten by hand.\n", encoding="utf-8")
    assert xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--record")[0] == 0
    card = (model / CARD).read_text(encoding="utf-8")
    assert card.startswith("# Our model\n\nWritten by hand.\n\n## Test metrics\n\n" + TEST_BEGIN)
    (model / CARD).unlink()  # no card at all: one is written from meta.json
    assert xdex_cli(monkeypatch, capsys, "evaluate", model, "--data", data, "--record")[0] == 0
    assert (model / CARD).read_text(encoding="utf-8").startswith("# ngame model trained on")
    pred = tmp_path / "pred.jsonl"
    pred.write_text("", encoding="utf-8")
    code, _, err = xdex_cli(monkeypatch, capsys, "evaluate", "--pred", pred, "--data", data, "--record")
    assert code != 0 and "--record adds the metrics to a model's card" in err
