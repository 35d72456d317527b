"""`xdex data stats|validate|convert` through typer's test runner and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys

from data_strategies import assert_same_dataset
from typer.testing import CliRunner

from xdex.cli import app
from xdex.data import load

runner = CliRunner()

CLEAN = {"labels.jsonl": '{"text": "A"}\n{"text": "B"}\n', "train.jsonl": '{"text": "x y", "labels": [0, 1]}\n'}
BROKEN = {
    "labels.jsonl": '{"text": "A"}\n',
    "train.jsonl": '{"text": "x", "labels": [0]}\n{"text": "y", "labels": [4]}\n',
}


def test_stats_table_on_demo():
    result = runner.invoke(app, ["data", "stats", "demo"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "dataset: foldoc-links"
    assert "N train" in lines[1] and lines[1].endswith(" 7288")
    assert any(line.startswith("avg points/label") and line.endswith(" 4.625") for line in lines)
    assert any(line.startswith("avg words/point ") and line.endswith(" 68.61") for line in lines)


def test_stats_json(make_folder):
    result = runner.invoke(app, ["data", "stats", str(make_folder(CLEAN)), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["n_train"] == 1 and stats["avg_labels_per_point"] == 2.0 and stats["avg_words_per_point"] == 2.0


def test_validate_clean_and_broken(make_folder):
    clean = make_folder(CLEAN, name="clean")
    result = runner.invoke(app, ["data", "validate", str(clean)])
    assert result.exit_code == 0 and result.stdout == f"no problems found in {clean}\n"

    broken = make_folder(BROKEN, name="broken")
    result = runner.invoke(app, ["data", "validate", str(broken)])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{broken / 'train.jsonl'}:2: label id 4 is out of range: there are 1 labels (ids 0..0)",
        f"1 problem(s) listed for {broken}",
    ]


def test_validate_lists_lone_surrogates_in_every_kind_of_text_file(make_folder):
    """A lone surrogate is valid JSON ("\\udc80") but no text: training would fail on it with no file or line."""
    jsonl = make_folder({"labels.jsonl": '{"text": "A"}\n{"text": "B \\udc80"}\n',
                         "train.jsonl": '{"text": "x \\ud800 y", "labels": [0, 1]}\n'}, name="jsonl")
    result = runner.invoke(app, ["data", "validate", str(jsonl)])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[:2] == [
        f'{jsonl / "labels.jsonl"}:2: "text" has a lone surrogate at character 3 (a text must be valid Unicode)',
        f'{jsonl / "train.jsonl"}:1: "text" has a lone surrogate at character 3 (a text must be valid Unicode)',
    ]
    raw = make_folder({"lbl_X.txt": "A\nB\n", "trn_X.txt": b"x \xed\xb2\x80 y\n", "trn_X_Y.txt": "1 2\n0:1\n"},
                      name="raw")
    result = runner.invoke(app, ["data", "validate", str(raw)])
    assert result.exit_code == 1 and result.stdout.startswith(f"{raw / 'trn_X.txt'}:1: invalid UTF-8 at byte 3")


def test_convert_round_trip(make_folder, tmp_path):
    source = make_folder(CLEAN)
    result = runner.invoke(app, ["data", "convert", str(source), str(tmp_path / "raw"), "--to", "xc-raw"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["data", "convert", str(tmp_path / "raw"), str(tmp_path / "back"), "--to", "jsonl"])
    assert result.exit_code == 0, result.output
    assert_same_dataset(load(source), load(tmp_path / "back"))

    again = runner.invoke(app, ["data", "convert", str(source), str(tmp_path / "raw"), "--to", "xc-raw"])
    assert again.exit_code == 1 and "already holds" in again.output


def _xdex(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xdex", *args], capture_output=True, text=True, timeout=120)


def test_broken_folder_gives_one_paragraph_and_exit_1(make_folder):
    broken = make_folder(BROKEN)
    commands = (["data", "stats", str(broken)], ["data", "convert", str(broken), str(broken / "out"), "--to", "jsonl"])
    for command in commands:
        done = _xdex(*command)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert f"{broken / 'train.jsonl'}:2: label id 4 is out of range" in done.stderr


def test_validate_exit_status_as_a_process(make_folder):
    done = _xdex("data", "validate", str(make_folder(BROKEN)))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "train.jsonl:2: label id 4 is out of range" in done.stdout
