"""Model directories: the size and SHA-256 of every file written are recorded in meta.json and checked at load;
a damaged config.yaml, meta.json or labels.jsonl is a clear error naming the file; saving never deletes a file
that xdex did not write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xdex.inference.card import CARD
from xdex.inference.model import MARKER, DualEncoderModel, file_record


def meta_of(folder) -> dict:
    return json.loads((folder / MARKER).read_text(encoding="utf-8"))


def rerecord(folder, name: str) -> None:
    """Record the current size and checksum of ``name`` in meta.json, as if xdex had written it so."""
    meta = meta_of(folder)
    meta["files"][name] = file_record(folder / name)
    (folder / MARKER).write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.parametrize("name", ["ngame", "unidec", "dexa"])
def test_every_file_written_is_recorded(trained, name):
    folder = trained[name]
    files = meta_of(folder)["files"]
    written = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
               and p.relative_to(folder).parts[0] != "training"} - {MARKER, "added_labels.npz", CARD}  # the card: docs
    assert set(files) == written
    assert {"config.yaml", "labels.jsonl", "label_embeddings.npy"} <= written
    assert any(n.startswith("encoder/") for n in files) and any(n.startswith("index/") for n in files)
    assert ("heads.safetensors" in files) == (name != "ngame")
    for path, record in files.items():
        assert record == file_record(folder / path)
    assert "files" not in DualEncoderModel.load(folder).meta  # the training metadata alone, as before


def test_a_changed_missing_or_resized_file_is_refused_by_name(copy_model):
    folder = copy_model("ngame")
    weights = next(p for p in (folder / "encoder").iterdir() if p.suffix == ".safetensors")
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{weights} has changed since the model was written \\(checksum differs\\)"):
        DualEncoderModel.load(folder)
    DualEncoderModel.load(folder, verify=False)  # sizes only: a quicker check
    weights.write_bytes(bytes(data[:-1]))
    with pytest.raises(ValueError, match="size differs.*the model directory is damaged"):
        DualEncoderModel.load(folder, verify=False)
    (folder / "index" / next(iter(p.name for p in (folder / "index").iterdir()))).unlink()
    weights.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(ValueError, match="is missing; the model directory is damaged"):
        DualEncoderModel.load(folder)


def test_each_file_is_hashed_once_when_loading_and_saving(copy_model, tmp_path, monkeypatch):
    """meta.json's checksums cover the index files, so the index's own checksums are not computed again."""
    import xdex.index.storage as storage
    import xdex.inference.model as model_module

    hashed: list[str] = []

    def counting(path):
        hashed.append(Path(path).as_posix())
        return real(path)

    real = storage.file_digest
    monkeypatch.setattr(storage, "file_digest", counting)
    monkeypatch.setattr(model_module, "file_digest", counting)
    model = DualEncoderModel.load(copy_model("ngame"))
    assert hashed and len(hashed) == len(set(hashed))
    hashed.clear()
    model.save(tmp_path / "again")
    assert hashed and len(hashed) == len(set(hashed))
    assert meta_of(tmp_path / "again")["files"] == {
        name: file_record(tmp_path / "again" / name) for name in meta_of(tmp_path / "again")["files"]}


def test_model_directories_without_checksums_still_load(copy_model, caplog):
    folder = copy_model("ngame")
    meta = meta_of(folder)
    del meta["files"]
    (folder / MARKER).write_text(json.dumps(meta), encoding="utf-8")
    with caplog.at_level("DEBUG", logger="xdex.inference.model"):
        model = DualEncoderModel.load(folder)
    assert len(model.label_ids) == 64 and "without checksums" in caplog.text


@pytest.mark.parametrize("content, message", [
    ("method: [unclosed\n", r"config.yaml:\d+: invalid YAML"),
    ("- a list\n", "config.yaml: expected a mapping at the top level"),
    ("method: ngame\nshiny_new_option: 3\n", "config.yaml: .*shiny_new_option"),
    ("trainer:\n  epochs: many\n", "config.yaml: .*trainer.epochs"),
    (b"method: \xff\n", "config.yaml: cannot be read"),
])
def test_a_damaged_config_is_named(copy_model, content, message):
    folder = copy_model("ngame")
    path = folder / "config.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match="has changed since the model was written"):
        DualEncoderModel.load(folder)  # the checksum sees it first
    rerecord(folder, "config.yaml")
    with pytest.raises(ValueError, match=message):
        DualEncoderModel.load(folder)


@pytest.mark.parametrize("content, message", [
    ("{not json", r"meta.json:1: invalid JSON"),
    ("[1, 2]", "meta.json: expected a JSON object"),
    ('{"files": 3}', 'meta.json: "files" must be an object'),
    ('{"files": {"../outside": {"bytes": 1, "sha256": "00"}}}', "damaged entry for '../outside'"),
    ("[" * 100000, "meta.json: invalid JSON \\(nested too deeply\\)"),
])
def test_a_damaged_meta_json_is_named(copy_model, content, message):
    folder = copy_model("ngame")
    (folder / MARKER).write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        DualEncoderModel.load(folder)


def test_saving_never_deletes_files_xdex_did_not_write(copy_model, tmp_path):
    folder = copy_model("ngame")
    model = DualEncoderModel.load(folder)
    model.save(folder)  # its own files: replaced
    assert meta_of(folder)["files"] == meta_of(folder)["files"] and DualEncoderModel.load(folder)
    notes = folder / "encoder" / "my-notes.txt"
    notes.write_text("mine")
    with pytest.raises(FileExistsError, match="encoder/my-notes.txt, which xdex did not write"):
        model.save(folder)
    assert notes.read_text() == "mine"
    stranger = tmp_path / "stranger"
    (stranger / "index").mkdir(parents=True)
    (stranger / "index" / "data.bin").write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="index/data.bin"):
        model.save(stranger)
    assert (stranger / "index" / "data.bin").read_bytes() == b"precious"
    assert sorted(p.name for p in stranger.iterdir()) == ["index"]  # nothing written
    fresh = tmp_path / "fresh"
    model.save(fresh)
    np.testing.assert_array_equal(DualEncoderModel.load(fresh).label_embeddings, model.label_embeddings)


def _corrupt(data: bytes, how: str, at: float, noise: bytes) -> bytes:
    cut = int(len(data) * at)
    if how == "truncate":
        return data[:cut]
    if how == "overwrite":
        return data[:cut] + noise + data[cut + len(noise):]
    if how == "insert":
        return data[:cut] + noise + data[cut:]
    if how == "deep":
        return data[:cut] + b"[" * 100000 + data[cut:]
    if how == "surrogate":
        return data[:cut] + b'"\\ud800"' + data[cut:]
    return b""  # empty


@pytest.fixture(scope="module")
def fuzz_root(trained, tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["config.yaml", MARKER, "labels.jsonl"]),
       how=st.sampled_from(["truncate", "overwrite", "insert", "deep", "surrogate", "empty"]),
       at=st.floats(0, 1), noise=st.binary(min_size=1, max_size=8), trusted=st.booleans())
def test_corrupted_model_files_give_a_clear_error(trained, fuzz_root, name, how, at, noise, trusted):
    """Whatever happens to config.yaml, meta.json or labels.jsonl, loading gives the model or a ValueError naming
    the file (``trusted``: the damage is also recorded in meta.json, so the readers themselves must see it)."""
    folder = fuzz_root / "model"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(trained["ngame"], folder)
    path = folder / name
    path.write_bytes(_corrupt(path.read_bytes(), how, at, noise))
    if trusted and name != MARKER:
        rerecord(folder, name)
    try:
        DualEncoderModel.load(folder)
    except ValueError as e:  # a damaged meta.json may record another file's checksum wrongly: that file is named
        assert str(folder / name) in str(e) or (name == MARKER and str(folder) in str(e)), str(e)


def test_predict_with_a_damaged_model_is_one_line_of_error(copy_model, tmp_path, monkeypatch, capsys):
    from cli_runner import xdex_cli

    folder = copy_model("ngame")
    config = yaml.safe_load((folder / "config.yaml").read_text())
    (folder / "config.yaml").write_text(yaml.safe_dump({**config, "unknown": 1}))
    rerecord(folder, "config.yaml")
    source = tmp_path / "in.txt"
    source.write_text("a text\n")
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", folder, "--input", source, "--output",
                               tmp_path / "out.jsonl")
    assert code == 1 and "Traceback" not in stderr and f"{folder / 'config.yaml'}" in stderr and "unknown" in stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_a_model_written_with_settings_since_renamed_still_loads(copy_model):
    import yaml

    folder = copy_model("unidec")
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["heads"]["lam"] = config["heads"].pop("de_weight")  # as xdex 0.1.0 wrote it
    config["loss"]["lam"] = config["loss"].pop("q2l_weight")
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    rerecord(folder, "config.yaml")
    model = DualEncoderModel.load(folder)
    assert model.config["heads"]["lam"] == config["heads"]["lam"]  # kept as written: added labels still match
    assert model.predict(["a text"], 2).indices.shape == (1, 2)
