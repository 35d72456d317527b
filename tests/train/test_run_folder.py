"""`xdex train --out DIR` writes only into a new, empty or unfinished-xdex folder, and never deletes a user's file."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from cli_runner import xdex_cli

import xdex.data
from xdex.data.synthetic import memorisation_task
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.train.run_folder import RunFolderError, refusal, remove_stale_temporaries

QUICK = ["--set", "trainer.epochs=1", "--set", "sampling.batch_size=64", "--set", "data.validation_size=50",
         "--set", "encoder.dim=16", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "task"
    xdex.data.save(memorisation_task(n=400, length=6, vocab_size=300, seed=1), folder, "jsonl")
    return folder


@pytest.fixture
def xdex_train(monkeypatch, capsys):
    """Run `xdex train --method dexml` as the command line does; its exit code and what it printed."""

    def run(data, out, *extra):
        code, stdout, stderr = xdex_cli(monkeypatch, capsys, "train", "--method", "dexml", "--data", data, "--out",
                                        out, *QUICK, *extra)
        return SimpleNamespace(exit_code=code, output=stdout + stderr)

    return run


def test_a_folder_with_the_users_files_is_refused_and_left_alone(data, tmp_path, xdex_train):
    out = tmp_path / "U"
    (out / "index").mkdir(parents=True)
    (out / "encoder").mkdir()
    (out / "index" / "important.txt").write_text("x")
    (out / "encoder" / "my_notes.txt").write_text("y")
    (out / "config.yaml").write_text("mine: true\n")
    result = xdex_train(data, out)
    assert result.exit_code == 1
    assert "is not empty and is not an xdex run" in result.output and "config.yaml, encoder, index" in result.output
    assert (out / "index" / "important.txt").read_text() == "x"
    assert (out / "encoder" / "my_notes.txt").read_text() == "y"
    assert (out / "config.yaml").read_text() == "mine: true\n"
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "encoder", "index"]


def test_a_new_or_empty_folder_trains(data, tmp_path, xdex_train):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        assert xdex_train(data, out).exit_code == 0
        assert (out / "meta.json").is_file()


def test_a_file_as_out_is_refused(data, tmp_path, xdex_train):
    (tmp_path / "f").write_text("keep")
    result = xdex_train(data, tmp_path / "f")
    assert result.exit_code == 1 and "is a file" in result.output and (tmp_path / "f").read_text() == "keep"


def test_a_failure_before_training_leaves_no_trace(data, tmp_path, monkeypatch):
    import xdex.methods.pipeline as pipeline

    def broken(*args, **kwargs):
        raise ValueError("the encoder cannot be built")

    monkeypatch.setattr(pipeline, "build_encoder", broken)
    for out, existed in ((tmp_path / "new", False), (tmp_path / "empty", True)):
        if existed:
            out.mkdir()
        cfg = load_recipe("dexml", overrides=["trainer.progress=false"])
        with pytest.raises(ValueError, match="cannot be built"):
            train(xdex.data.load(data), cfg, out)
        assert out.exists() == existed and not (out.exists() and any(out.iterdir()))


def test_an_unfinished_run_needs_resume(data, tmp_path, xdex_train):
    out = tmp_path / "run"
    (out / "training").mkdir(parents=True)
    (out / "training" / "config.yaml").write_text("method: dexml\n")  # as a run killed before its first epoch
    result = xdex_train(data, out)
    assert result.exit_code == 1 and "unfinished xdex run" in result.output and "--resume" in result.output
    assert (out / "training" / "config.yaml").read_text() == "method: dexml\n"
    assert refusal(out, resume=True) is None


def test_stale_temporary_files_of_a_killed_save_are_removed_on_resume(data, tmp_path, xdex_train):
    out = tmp_path / "run"
    assert xdex_train(data, out, "--set", "trainer.epochs=2").exit_code == 0
    (out / "meta.json").unlink()  # as if killed while writing the model: an unfinished run
    stale = out / "training" / ".checkpoint.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    user_file = out / "training" / "notes.tmp"  # not an atomic-write temporary: kept
    user_file.write_text("mine")
    assert xdex_train(data, out, "--set", "trainer.epochs=2", "--resume").exit_code == 0
    assert not stale.exists() and user_file.read_text() == "mine" and (out / "meta.json").is_file()
    stale.write_bytes(b"")
    assert remove_stale_temporaries(out / "training") == [stale]

def test_resume_with_a_crafted_checkpoint_runs_no_code_and_says_why(data, tmp_path, xdex_train):
    import torch

    out = tmp_path / "run"
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    result = xdex_train(data, out, "--set", "trainer.epochs=2")
    assert result.exit_code == 0
    (out / "meta.json").unlink()
    torch.save({"model": Payload()}, out / "training" / "checkpoint.pt")
    result = xdex_train(data, out, "--set", "trainer.epochs=2", "--resume")
    assert result.exit_code == 1, result.output
    assert "checkpoint.pt: not a training checkpoint xdex can read safely" in result.output
    assert not marker.exists()


def test_refusal_names_what_is_in_the_way(tmp_path):
    for i in range(8):
        (tmp_path / f"f{i}").write_text("")
    message = refusal(tmp_path, resume=False)
    assert message is not None and "f0, f1, f2, f3, f4 and 3 more" in message
    with pytest.raises(RunFolderError):
        train(None, load_recipe("dexml"), tmp_path)  # refused before the data is looked at


def test_a_run_killed_while_writing_its_model_resumes(data, tmp_path, xdex_train):
    out = tmp_path / "run"
    assert xdex_train(data, out, "--set", "trainer.epochs=2").exit_code == 0
    (out / "meta.json").unlink()  # encoder/ and index/ written, meta.json (written last) not yet
    result = xdex_train(data, out, "--set", "trainer.epochs=2", "--resume")
    assert result.exit_code == 0, result.output
    assert (out / "meta.json").is_file()
