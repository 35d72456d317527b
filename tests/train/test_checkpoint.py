"""Training checkpoints load without running code, and a file of another form is refused by name."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from xdex.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


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
