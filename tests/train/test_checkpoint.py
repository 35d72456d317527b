"""Training checkpoints load without running code, and a file of another form is refused by name."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest
import torch

from xdex.train.checkpoint import CheckpointError, CheckpointWriter, load_checkpoint, save_checkpoint


def state(objective: dict | None = None) -> dict:
    return {"epoch": 2, "model": {"w": torch.ones(3)}, "optimizers": [{"state": {}, "param_groups": []}],
            "schedulers": [{"last_epoch": 3}], "objective": objective or {}, "history": [{"epoch": 1, "loss": 0.5}],
            "best": (0.25, 1, {"w": torch.zeros(3)})}


class Payload:
    """Unpickling this object calls ``touch`` on ``marker``: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_arrays_of_the_objective_come_back_as_arrays(tmp_path):
    clusters = [np.array([0, 3], np.int64), np.array([1], np.int64)]
    shortlist = np.arange(6, dtype=np.int32).reshape(2, 3)
    save_checkpoint(tmp_path / "c.pt", state({"clusters": clusters, "shortlist": shortlist, "none": None}))
    loaded = load_checkpoint(tmp_path / "c.pt", "cpu")
    assert [a.tolist() for a in loaded["objective"]["clusters"]] == [[0, 3], [1]]
    assert isinstance(loaded["objective"]["shortlist"], np.ndarray)
    np.testing.assert_array_equal(loaded["objective"]["shortlist"], shortlist)
    assert loaded["objective"]["none"] is None and loaded["epoch"] == 2 and loaded["best"][:2] == (0.25, 1)



def test_a_list_of_many_arrays_is_stored_as_two_tensors_and_comes_back_the_same(tmp_path):
    """Query clusters: thousands of short arrays, each a record of the archive if stored one by one."""
    rng = np.random.default_rng(0)
    clusters = [rng.permutation(50)[: rng.integers(0, 6)].astype(np.int64) for _ in range(3000)]
    save_checkpoint(tmp_path / "c.pt", state({"clusters": clusters, "mixed": [np.zeros(2, np.int32), np.ones(1)]}))
    with zipfile.ZipFile(tmp_path / "c.pt") as archive:
        assert len([name for name in archive.namelist() if "/data/" in name]) < 20
    loaded = load_checkpoint(tmp_path / "c.pt", "cpu")["objective"]
    assert len(loaded["clusters"]) == 3000
    pairs = zip(loaded["clusters"], clusters, strict=True)
    assert all(a.dtype == np.int64 and a.tolist() == b.tolist() for a, b in pairs)
    assert [a.dtype for a in loaded["mixed"]] == [np.int32, np.float64]  # two dtypes: stored one by one


def test_a_checkpoint_of_arrays_stored_one_by_one_still_loads(tmp_path):
    """A run checkpointed before the packing resumes."""
    older = {"xdex_checkpoint": 1, **state({"clusters": [torch.tensor([0, 3]), torch.tensor([1])]})}
    torch.save(older, tmp_path / "c.pt")
    assert [a.tolist() for a in load_checkpoint(tmp_path / "c.pt", "cpu")["objective"]["clusters"]] == [[0, 3], [1]]


@pytest.mark.parametrize("sizes", [[2, 2], [3, -1], []])
def test_a_packed_list_whose_sizes_do_not_fit_is_refused(tmp_path, sizes):
    packed = {"xdex_packed_arrays": torch.arange(3), "sizes": torch.tensor(sizes, dtype=torch.int64)}
    torch.save({"xdex_checkpoint": 1, **state({"clusters": packed})}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: damaged training checkpoint \(a packed list"):
        load_checkpoint(tmp_path / "checkpoint.pt", "cpu")

@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_crafted_checkpoint_runs_no_code(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "checkpoint.pt"
    torch.save({**state(), "xdex_checkpoint": 1, "objective": {"x": Payload(marker)}}, path,
               pickle_protocol=protocol)
    with pytest.raises(CheckpointError, match="checkpoint.pt: not a training checkpoint xdex can read safely"):
        load_checkpoint(path, "cpu")
    assert not marker.exists()
    with open(path, "wb") as f:  # a plain pickle, not even a torch archive
        pickle.dump(Payload(marker), f, protocol=protocol)
    with pytest.raises(CheckpointError, match="checkpoint.pt"):
        load_checkpoint(path, "cpu")
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"garbage", b"PK\x03\x04" + b"\0" * 40])
def test_an_unreadable_file_is_refused_with_its_name(tmp_path, content):
    (tmp_path / "checkpoint.pt").write_bytes(content)
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: .*start the run afresh"):
        load_checkpoint(tmp_path / "checkpoint.pt", "cpu")


@pytest.mark.parametrize("change", [
    lambda s: s.pop("model"),
    lambda s: s.update(epoch="2"),
    lambda s: s.update(best=(0.1, 1)),
    lambda s: s.update(xdex_checkpoint=99),
    lambda s: s.pop("xdex_checkpoint"),
])
def test_a_checkpoint_of_another_form_is_refused(tmp_path, change):
    s = {"xdex_checkpoint": 1, **state()}
    change(s)
    torch.save(s, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: "):
        load_checkpoint(tmp_path / "checkpoint.pt", "cpu")
    torch.save([1, 2], tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="not an xdex training checkpoint"):
        load_checkpoint(tmp_path / "checkpoint.pt", "cpu")


def test_the_writer_saves_the_state_as_it_was_when_handed_over(tmp_path):
    """Training changes the tensors in place while the file is written: the file holds the copy."""
    s = state({"shortlist": np.arange(4)})
    writer = CheckpointWriter()
    writer.save(tmp_path / "c.pt", s, keep=("best",))
    s["model"]["w"].add_(10.0)
    s["objective"]["shortlist"][:] = -1
    s["history"].append({"epoch": 2})
    writer.wait()
    loaded = load_checkpoint(tmp_path / "c.pt", "cpu")
    assert loaded["model"]["w"].tolist() == [1.0, 1.0, 1.0]
    assert loaded["objective"]["shortlist"].tolist() == [0, 1, 2, 3]
    assert loaded["history"] == [{"epoch": 1, "loss": 0.5}]
    writer.save(tmp_path / "c.pt", {**s, "epoch": 3})  # the next one replaces it
    writer.close()
    assert load_checkpoint(tmp_path / "c.pt", "cpu")["epoch"] == 3
    writer.save(tmp_path / "c.pt", {**s, "epoch": 4})  # a closed writer starts a thread again
    writer.close()
    assert load_checkpoint(tmp_path / "c.pt", "cpu")["epoch"] == 4


def test_a_failed_write_is_raised_by_the_next_wait_and_leaves_the_checkpoint_before_it(tmp_path):
    writer = CheckpointWriter()
    writer.save(tmp_path / "c.pt", state())
    writer.wait()
    (tmp_path / "blocked").mkdir()
    writer.save(tmp_path / "blocked", state())  # a folder where the file should go: the rename fails
    with pytest.raises(OSError):
        writer.wait()
    writer.wait()  # raised once
    assert load_checkpoint(tmp_path / "c.pt", "cpu")["epoch"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "c.pt"]  # no temporary file left
