import json
import math
import sys

import pytest
from typer.testing import CliRunner

from xdex.cli import app, main

C = (math.log(4) - 1) * 2.5**0.55  # propensity constant for N = 4 training documents, A = 0.55, B = 1.5
Q0 = 1 + C * 4.5**-0.55  # label 0: 3 training documents -> 1.2796
Q1 = Q2 = math.log(4)  # labels 1 and 2: 1 training document -> q = ln N = 1.3863
Q3 = 1 + C * 1.5**-0.55  # label 3: no training document -> 1.5116


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture()
def folder(tmp_path):
    """4 labels; train label sets {0}, {0,1}, {0}, {2}; test {1,2}, {0}, {3}; filter pairs (0,3), (2,0)."""
    data = tmp_path / "tiny"
    data.mkdir()
    write_jsonl(data / "labels.jsonl", [{"id": i, "key": f"l{i}", "text": f"label {i}"} for i in range(4)])
    train = [[0], [0, 1], [0], [2]]
    write_jsonl(data / "train.jsonl", [{"id": i, "text": f"train {i}", "labels": y} for i, y in enumerate(train)])
    test = [[1, 2], [0], [3]]
    write_jsonl(data / "test.jsonl", [{"id": i, "text": f"test {i}", "labels": y} for i, y in enumerate(test)])
    (data / "filter_labels_test.txt").write_text("0 3\n2 0\n")
    return data


@pytest.fixture()
def predictions(tmp_path):
    # doc 0 ranks [3, 1, 0]: the filter removes 3, leaving [1, 0]; doc 1 has none; doc 2 ranks [0, 3] -> [3]
    path = tmp_path / "pred.jsonl"
    write_jsonl(path, [
        {"id": 2, "labels": [0, 3], "scores": [0.9, 0.1]},
        {"id": 1, "labels": [], "scores": []},
        {"id": 0, "labels": [3, 1, 0], "scores": [0.9, 0.8, 0.7]},
    ])
    return path


def run_json(*args):
    result = CliRunner().invoke(app, ["evaluate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_metrics_by_hand(folder, predictions):
    m = run_json("--pred", str(predictions), "--data", str(folder), "--k", "1,2", "--recall-k", "2")
    assert list(m) == ["P@1", "P@2", "nDCG@1", "nDCG@2", "PSP@1", "PSP@2", "PSnDCG@1", "PSnDCG@2", "R@2"]
    # after filtering: doc 0 [1, 0] vs {1, 2} hit at 1; doc 1 nothing vs {0}; doc 2 [3] vs {3} hit at 1
    assert m["P@1"] == pytest.approx(100 * 2 / 3)
    assert m["P@2"] == pytest.approx(100 * (1 / 2 + 0 + 1 / 2) / 3)
    # nDCG@2: doc 0 1 / (1 + 1/log2(3)) = 0.6131, doc 2 1/1
    assert m["nDCG@2"] == pytest.approx(100 * (1 / (1 + 1 / math.log2(3)) + 1) / 3)
    assert m["R@2"] == pytest.approx(100 * (1 / 2 + 0 + 1) / 3)
    # PSP@1 = (q1 + 0 + q3) / (max(q1, q2) + q0 + q3) = 2.8979 / 4.1775
    assert m["PSP@1"] == pytest.approx(100 * (Q1 + Q3) / (Q1 + Q0 + Q3))
    assert m["PSP@1"] == pytest.approx(69.3694, abs=1e-4)


def test_defaults_and_no_propensity(folder, predictions):
    m = run_json("--pred", str(predictions), "--data", str(folder), "--propensity", "none")
    assert list(m) == ["P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5", "R@5", "R@10"]
    with_ps = run_json("--pred", str(predictions), "--data", str(folder))
    assert [name for name in with_ps if name.startswith("PS")] == [
        "PSP@1", "PSP@3", "PSP@5", "PSnDCG@1", "PSnDCG@3", "PSnDCG@5"]


def test_score_matrix_files_give_the_same_metrics(folder, predictions, tmp_path):
    from xdex.metrics import read_predictions, write_predictions

    expected = run_json("--pred", str(predictions), "--data", str(folder), "--propensity", "amazon")
    for name in ("pred.npz", "pred.txt"):
        write_predictions(tmp_path / name, read_predictions(predictions, 3, 4), n_labels=4)
        assert run_json("--pred", str(tmp_path / name), "--data", str(folder), "--propensity", "0.6,2.6") == expected


def test_table_and_decile_plot(folder, predictions, tmp_path):
    plot = tmp_path / "deciles.png"
    args = ["evaluate", "--pred", str(predictions), "--data", str(folder), "--k", "1,2", "--deciles", str(plot)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["@1", "@2", "@5", "@10"]  # R@5 and R@10 by default
    assert lines[1].split() == ["P", "66.67", "33.33"]
    assert "share of P@2 by label decile" in result.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"


def run_main(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["xdex", "evaluate", *args])
    with pytest.raises(SystemExit) as info:
        main()
    return info.value.code, capsys.readouterr().err


def test_errors_are_one_paragraph(folder, predictions, monkeypatch, capsys):
    broken = predictions.parent / "broken.jsonl"
    broken.write_text('{"id": 0, "labels": [1], "scores": [1]}\n{"id": 9, "labels": [], "scores": []}\n')
    code, err = run_main(monkeypatch, capsys, "--pred", str(broken), "--data", str(folder))
    assert code == 1
    assert f"{broken}:2: \"id\" 9 is out of range" in err and "Traceback" not in err
    code, err = run_main(monkeypatch, capsys, "--pred", str(predictions), "--data", str(folder), "--k", "0,x")
    assert (code, err.strip()) == (1, "error: --k: expected comma-separated positive integers such as 1,3,5, got '0,x'")
    code, err = run_main(monkeypatch, capsys, "--pred", str(predictions), "--data", str(folder), "--propensity", "x")
    assert code == 1 and "expected one of default, amazon, wikipedia" in err
    code, err = run_main(monkeypatch, capsys, "--pred", str(folder / "absent.jsonl"), "--data", str(folder))
    assert code == 1 and "prediction file not found" in err
