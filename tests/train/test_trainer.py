import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

from xdex.train import OptimConfig, Trainer, TrainerConfig, lr_factor


class Interrupt(Exception):
    pass


class ToyObjective:
    """Regression of a fixed random target with a dense layer, a sparse table and dropout."""

    def __init__(self, fail_at: tuple[int, int] | None = None):
        torch.manual_seed(0)
        self.model = nn.ModuleDict(
            {"table": nn.Embedding(20, 4, sparse=True), "dense": nn.Linear(4, 1), "drop": nn.Dropout(0.2)}
        )
        g = torch.Generator().manual_seed(1)
        self.target = torch.randn(20, generator=g)
        self.fail_at = fail_at
        self.refreshes = 0

    def steps_per_epoch(self):
        return 5

    def start_epoch(self, epoch):
        self.refreshes += 1

    def batches(self, epoch):
        rng = np.random.default_rng([3, epoch])
        return [(epoch, i, torch.as_tensor(rng.permutation(20)[:4])) for i in range(5)]

    def loss(self, batch):
        epoch, i, ids = batch
        if self.fail_at == (epoch, i):
            raise Interrupt()
        pred = self.model["dense"](self.model["drop"](self.model["table"](ids))).squeeze(-1)
        return ((pred - self.target[ids]) ** 2).mean()

    def epoch_stats(self):
        return {"refreshes": float(self.refreshes)}

    def state_dict(self):
        return {"refreshes": self.refreshes}

    def load_state_dict(self, state):
        self.refreshes = state["refreshes"]


def _cfg(epochs=4):
    return TrainerConfig(epochs=epochs, optim=OptimConfig(lr=0.05, lr_sparse=0.1), progress=False)


def test_loss_decreases_and_log_is_written(tmp_path):
    obj = ToyObjective()
    history = Trainer(obj, _cfg(6), tmp_path).fit()
    assert history[-1]["loss"] < history[0]["loss"]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3, 4, 5, 6]


def test_resume_after_interruption_equals_uninterrupted_run(tmp_path):
    full = ToyObjective()
    Trainer(full, _cfg(), tmp_path / "a").fit()

    broken = ToyObjective(fail_at=(2, 3))  # dies in the middle of the third epoch
    with pytest.raises(Interrupt):
        Trainer(broken, _cfg(), tmp_path / "b").fit()
    resumed = ToyObjective()
    history = Trainer(resumed, _cfg(), tmp_path / "b").fit(resume=True)
    assert [r["epoch"] for r in history] == [1, 2, 3, 4]
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    assert resumed.refreshes == full.refreshes


def test_validation_selects_the_best_epoch(tmp_path):
    obj = ToyObjective()
    scores = iter([1.0, 3.0, 2.0])
    snapshots = []

    def evaluate():
        snapshots.append({k: v.clone() for k, v in obj.model.state_dict().items()})
        return {"P@1": next(scores)}

    Trainer(obj, _cfg(3), tmp_path, evaluate=evaluate).fit()
    for k, v in obj.model.state_dict().items():
        assert torch.equal(v, snapshots[1][k])


def test_lr_schedule_warmup_then_decay():
    cfg = OptimConfig(warmup_ratio=0.1, schedule="linear")
    assert lr_factor(0, 100, cfg) == pytest.approx(0.1)
    assert lr_factor(9, 100, cfg) == pytest.approx(1.0)
    assert lr_factor(55, 100, cfg) == pytest.approx(0.5)
    cos = OptimConfig(warmup_ratio=0.0, schedule="cosine")
    assert lr_factor(50, 100, cos) == pytest.approx(0.5)
    assert lr_factor(100, 100, cos) == pytest.approx(0.0)


def test_the_objectives_loss_terms_are_logged_every_epoch(tmp_path):
    from xdex.losses import WeightedSum

    obj = ToyObjective()
    obj.loss_terms = WeightedSum({"mse": 1.0})
    plain = obj.loss
    obj.loss = lambda batch: obj.loss_terms(mse=plain(batch))
    history = Trainer(obj, _cfg(epochs=2), tmp_path).fit()
    assert [sorted(k for k in r if k.startswith("loss")) for r in history] == [["loss", "loss_mse"]] * 2
    for record in history:  # one term of weight 1: its mean is the epoch's loss; reset between epochs
        assert record["loss_mse"] == pytest.approx(record["loss"])


def _counting_saves(monkeypatch) -> list[int]:
    import xdex.train.checkpoint as checkpoint_module

    saved: list[int] = []
    real = checkpoint_module.save_checkpoint
    monkeypatch.setattr(checkpoint_module, "save_checkpoint", lambda path, state: (saved.append(state["epoch"] + 1),
                                                                                    real(path, state)))
    return saved


@pytest.mark.parametrize("seconds, epochs_saved", [(0.0, [1, 2, 3, 4]), (1e9, [4])])
def test_checkpoints_follow_checkpoint_seconds_and_the_last_epoch_is_always_saved(
        tmp_path, monkeypatch, seconds, epochs_saved):
    saved = _counting_saves(monkeypatch)
    cfg = dataclasses.replace(_cfg(4), checkpoint_seconds=seconds)
    Trainer(ToyObjective(), cfg, tmp_path).fit()
    assert saved == epochs_saved
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3, 4]  # the log is written every epoch


def test_a_run_without_a_checkpoint_yet_resumes_from_the_start_and_ends_as_an_uninterrupted_one(tmp_path, monkeypatch):
    cfg = dataclasses.replace(_cfg(4), checkpoint_seconds=1e9)
    full = ToyObjective()
    Trainer(full, cfg, tmp_path / "a").fit()
    saved = _counting_saves(monkeypatch)
    with pytest.raises(Interrupt):
        Trainer(ToyObjective(fail_at=(2, 3)), cfg, tmp_path / "b").fit()
    assert saved == []  # two epochs done, none of them checkpointed ...
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]  # ... though logged
    resumed = ToyObjective()
    history = Trainer(resumed, cfg, tmp_path / "b").fit(resume=True)
    assert [r["epoch"] for r in history] == [1, 2, 3, 4]
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
