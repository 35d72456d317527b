"""`xdex predict`: rows in input order, bad lines reported and kept in place, resuming a stopped run; and
the predictions of `xdex.Predictor` and `xdex predict` are those `xdex evaluate` scores."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import xdex_cli

import xdex.data
from xdex.cli.evaluate import _load_model
from xdex.cli.predict import LISTED, count_lines
from xdex.inference import DualEncoderModel, Predictor


def stopped_at_the_second_batch(monkeypatch, capsys, *args) -> int:
    """The exit code of `xdex ARGS` interrupted (Ctrl-C) when the model predicts its second batch."""
    calls = 0
    predict = DualEncoderModel.predict

    def stop_at_the_second_batch(self, texts, k=10):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return predict(self, texts, k)

    with monkeypatch.context() as patch:
        patch.setattr(DualEncoderModel, "predict", stop_at_the_second_batch)
        code, _, _ = xdex_cli(monkeypatch, capsys, *args)
    return code



def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def model_dir(trained):
    return trained["ngame"]


@pytest.fixture()
def lines(toy, tmp_path):
    """Ten test texts as JSONL, with three bad lines among them: malformed JSON (line 3), no "text" (line 6)
    and a blank text (line 8)."""
    good = iter(toy.test.texts)
    content = [json.dumps({"text": next(good)}) for _ in range(10)]
    content[2], content[5], content[7] = '{"text": "unclosed', '{"title": "no text"}', '{"text": "  "}'
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(content) + "\n", encoding="utf-8")
    return path


def test_rows_follow_the_input_lines_and_bad_lines_are_reported_in_place(model_dir, lines, tmp_path, monkeypatch,
                                                                          capsys):
    out = tmp_path / "out.jsonl"
    code, stdout, stderr = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", lines, "--output", out,
                                    "--k", 3, "--batch-size", 4)
    assert code == 3  # finished, with bad lines
    assert f"{lines}:3: malformed JSON" in stderr
    assert f'{lines}:6: expected an object with a string "text" field' in stderr
    assert f"{lines}:8: blank text" in stderr
    assert "10 rows" in stdout and "3 bad lines" in stdout
    got = rows(out)
    assert [row["id"] for row in got] == list(range(10))
    assert [row.get("line") for row in got if "error" in row] == [3, 6, 8]
    model = DualEncoderModel.load(model_dir)
    texts = [json.loads(line)["text"] for i, line in enumerate(lines.read_text().splitlines()) if i not in (2, 5, 7)]
    expected = model.predict(texts, 3)
    good = [row for row in got if "error" not in row]
    assert [row["labels"] for row in good] == expected.indices.tolist()
    assert [row["keys"] for row in good] == [[model.label_ids[j] for j in r] for r in expected.indices]
    np.testing.assert_allclose([row["scores"] for row in good], expected.scores, atol=1e-6)
    assert all(row["labels"] == row["scores"] == row["keys"] == [] for row in got if "error" in row)


def test_plain_text_lines_and_invalid_utf8(model_dir, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(b"first text\n\xff\xfe broken\n\nlast text without newline")
    out = tmp_path / "out.jsonl"
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", source, "--output", out)
    assert code == 3
    assert f"{source}:2: invalid UTF-8 at byte 1" in stderr and f"{source}:3: blank text" in stderr
    assert [("error" in row) for row in rows(out)] == [False, True, True, False]


def test_many_bad_lines_are_counted_after_the_first_ones(model_dir, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n" * (LISTED + 5) + "a text\n")
    code, stdout, stderr = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", source, "--output",
                                    tmp_path / "out.jsonl")
    assert code == 3 and stderr.count("blank text") == LISTED
    assert "... and 5 more bad lines" in stderr and f"{LISTED + 5} bad lines" in stdout


def test_a_stopped_run_continues_where_it_stopped(model_dir, lines, tmp_path, monkeypatch, capsys):
    reference = tmp_path / "reference.jsonl"
    args = ["predict", model_dir, "--input", lines, "--k", 4, "--batch-size", 3]
    xdex_cli(monkeypatch, capsys, *args, "--output", reference)
    out = tmp_path / "out.jsonl"
    code = stopped_at_the_second_batch(monkeypatch, capsys, *args, "--output", out)
    assert code == 130 and len(rows(out)) == 3  # the first batch was written
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"id": 3, "labels": [1')  # and a partial row, as a kill in the middle of a write leaves
    code, stdout, stderr = xdex_cli(monkeypatch, capsys, *args, "--output", out)
    assert code == 3 and "7 predicted now, 3 from before" in stdout
    assert out.read_text() == reference.read_text()
    assert f"{lines}:3: malformed JSON" in stderr  # bad lines of the first run are reported again
    code, stdout, _ = xdex_cli(monkeypatch, capsys, *args, "--output", out)  # nothing left to do
    assert "0 predicted now, 10 from before" in stdout and out.read_text() == reference.read_text()


def test_outputs_of_other_runs_are_refused_unless_overwritten(model_dir, lines, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.jsonl"
    args = ["predict", model_dir, "--input", lines, "--output", out]
    xdex_cli(monkeypatch, capsys, *args, "--k", 3)
    code, _, stderr = xdex_cli(monkeypatch, capsys, *args, "--k", 5)
    assert code == 1 and "holds the predictions of another run (k 3 now 5)" in stderr and "--overwrite" in stderr
    code, _, _ = xdex_cli(monkeypatch, capsys, *args, "--k", 5, "--overwrite")
    assert code == 3 and all(len(row["labels"]) in (0, 5) for row in rows(out))
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text("my own notes\n")
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", lines, "--output", stranger)
    assert code == 1 and "was not written by `xdex predict`" in stderr
    assert stranger.read_text() == "my own notes\n"


def test_damaged_outputs_and_changed_inputs_are_refused(model_dir, lines, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.jsonl"
    args = ["predict", model_dir, "--input", lines, "--output", out]
    xdex_cli(monkeypatch, capsys, *args)
    text = out.read_text().splitlines(True)
    out.write_text("".join(text[:4] + ["garbage\n"] + text[5:]))
    code, _, stderr = xdex_cli(monkeypatch, capsys, *args)
    assert code == 1 and f"{out}:5: damaged row" in stderr
    out.write_text("".join(text))
    lines.write_text("\n".join(lines.read_text().splitlines()[:6]) + "\n")
    code, _, stderr = xdex_cli(monkeypatch, capsys, *args)
    assert code == 1 and "has 10 rows but" in stderr and "has only 6 lines" in stderr


def test_count_lines(tmp_path):
    for content, expected in [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)]:
        (tmp_path / "f").write_bytes(content)
        assert count_lines(tmp_path / "f") == expected


def test_the_predictor_ranks_as_evaluate_does(trained, toy, tmp_path, monkeypatch, capsys):
    """`xdex evaluate MODEL_DIR` scores the ranking of the model `_load_model` reads; the Predictor and `xdex predict`
    give the same ranking, so `xdex evaluate --pred` of their output gives the same metrics."""
    data = tmp_path / "toy"
    xdex.data.save(toy, data)
    dataset = xdex.data.load(data)
    for name in ("ngame", "unidec", "dexa"):
        folder = trained[name]
        evaluated = _load_model(folder, dataset, None, "cpu").predict(dataset.test.texts, 10)
        ranked = Predictor(folder).rank(dataset.test.texts, 10)
        assert ranked.indices.tolist() == evaluated.indices.tolist()
        np.testing.assert_array_equal(ranked.scores, evaluated.scores)
        source = tmp_path / f"{name}.jsonl"
        source.write_text("".join(json.dumps({"text": text}) + "\n" for text in dataset.test.texts))
        out = tmp_path / f"{name}-pred.jsonl"
        assert xdex_cli(monkeypatch, capsys, "predict", folder, "--input", source, "--output", out, "--k", 10)[0] == 0
        assert [row["labels"] for row in rows(out)] == evaluated.indices.tolist()
        code, from_model, _ = xdex_cli(monkeypatch, capsys, "evaluate", folder, "--data", data, "--json")
        assert code == 0
        code, from_file, _ = xdex_cli(monkeypatch, capsys, "evaluate", "--pred", out, "--data", data, "--json")
        assert code == 0 and json.loads(from_file) == json.loads(from_model)


def test_evaluate_scores_a_model_with_added_labels_and_counts_them_as_misses(copy_model, toy, tmp_path, monkeypatch,
                                                                             capsys):
    """Labels added after training are never in the ground truth: when one outranks the true label, P@1 drops
    by exactly that document."""
    data = tmp_path / "toy"
    xdex.data.save(toy, data)
    folder = copy_model("ngame")
    code, before, _ = xdex_cli(monkeypatch, capsys, "evaluate", folder, "--data", data, "--json")
    assert code == 0
    predictor = Predictor(folder)
    first = predictor.rank([toy.test.texts[0]], 1).indices[0, 0]
    hit = toy.test.labels[0, first] > 0
    predictor.add_labels([toy.test.texts[0]])  # the query's own text: its best label from now on
    assert predictor.rank([toy.test.texts[0]], 1).indices[0, 0] == len(toy.labels)
    code, after, _ = xdex_cli(monkeypatch, capsys, "evaluate", folder, "--data", data, "--json")
    assert code == 0
    drop = json.loads(before)["P@1"] - json.loads(after)["P@1"]
    assert drop == pytest.approx(100.0 / len(toy.test.texts) if hit else 0.0, abs=1e-6)


def test_lone_surrogates_and_deep_nesting_are_bad_lines_not_a_crash(model_dir, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "first text"}\n{"text": "\\ud800 x"}\n' + "[" * 100000 + '\n{"text": "last"}\n',
                      encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["predict", model_dir, "--input", source, "--output", out, "--batch-size", 2]
    code, stdout, stderr = xdex_cli(monkeypatch, capsys, *args)
    assert code == 3 and "Traceback" not in stderr
    assert f'{source}:2: "text" has a lone surrogate at character 1' in stderr
    assert f"{source}:3: malformed JSON (nested too deeply)" in stderr
    got = rows(out)
    assert [row["id"] for row in got] == [0, 1, 2, 3] and [("error" in row) for row in got] == [0, 1, 1, 0]
    code, stdout, _ = xdex_cli(monkeypatch, capsys, *args)  # a rerun has nothing left to do
    assert code == 3 and "0 predicted now, 4 from before" in stdout


def test_a_text_the_model_cannot_take_costs_only_its_own_row(model_dir, lines, tmp_path, monkeypatch, capsys):
    predict = DualEncoderModel.predict
    poison = json.loads(lines.read_text().splitlines()[3])["text"]

    def refuse_one_text(self, texts, k=10):
        if poison in texts:
            raise ValueError("this text cannot be tokenised")
        return predict(self, texts, k)

    monkeypatch.setattr(DualEncoderModel, "predict", refuse_one_text)
    out = tmp_path / "out.jsonl"
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", lines, "--output", out,
                               "--batch-size", 4)
    assert code == 3
    assert f"{lines}:4: cannot be predicted (ValueError: this text cannot be tokenised)" in stderr
    got = rows(out)
    assert [row["id"] for row in got] == list(range(10))
    assert [row.get("line") for row in got if "error" in row] == [3, 4, 6, 8]
    assert all(row["labels"] for row in got if "error" not in row)


def test_a_resume_refuses_an_input_whose_contents_changed(model_dir, lines, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.jsonl"
    args = ["predict", model_dir, "--input", lines, "--output", out, "--batch-size", 3]
    assert stopped_at_the_second_batch(monkeypatch, capsys, *args) == 130 and len(rows(out)) == 3
    sidecar = json.loads((tmp_path / "out.jsonl.run.json").read_text())
    assert sidecar["input_lines"] == 3  # the fingerprint covers the rows written
    original = lines.read_text()
    changed = original.splitlines(True)
    changed[0] = changed[0].replace('"text": "', '"text": "X', 1)  # same path, same number of lines
    lines.write_text("".join(changed))
    before = out.read_bytes()
    code, _, stderr = xdex_cli(monkeypatch, capsys, *args)
    assert code == 1 and f"the first 3 lines of {lines} are not those {out} was predicted from" in stderr
    assert "--overwrite" in stderr and out.read_bytes() == before
    lines.write_text(original)
    code, stdout, _ = xdex_cli(monkeypatch, capsys, *args)
    assert code == 3 and "7 predicted now, 3 from before" in stdout
    sidecar = json.loads((tmp_path / "out.jsonl.run.json").read_text())
    assert sidecar["input_lines"] == 10
    sidecar.pop("input_sha256")
    (tmp_path / "out.jsonl.run.json").write_text(json.dumps(sidecar))
    code, _, stderr = xdex_cli(monkeypatch, capsys, *args)
    assert code == 1 and "has no fingerprint of the input" in stderr


def test_the_model_is_frozen_out_of_full_collections_while_lines_are_predicted(model_dir, lines, tmp_path,
                                                                                 monkeypatch, capsys):
    import gc

    frozen = []
    predict = DualEncoderModel.predict

    def predict_and_look(self, texts, k=10):
        frozen.append(gc.get_freeze_count())
        return predict(self, texts, k)

    monkeypatch.setattr(DualEncoderModel, "predict", predict_and_look)
    assert gc.get_freeze_count() == 0
    code, _, _ = xdex_cli(monkeypatch, capsys, "predict", model_dir, "--input", lines, "--output",
                          tmp_path / "out.jsonl", "--batch-size", 4)
    assert code == 3 and len(frozen) == 3 and min(frozen) > 0  # 10 lines in batches of 4: the model frozen for each
    assert gc.get_freeze_count() == 0  # and the process as it was afterwards
