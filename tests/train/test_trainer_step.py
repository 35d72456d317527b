"""``Trainer.step``: the one optimisation step that every epoch of ``fit`` runs."""

import numpy as np
import torch
from torch import nn

from xdex.train import OptimConfig, Trainer, TrainerConfig


class Pairs:
    """Four batches of a linear regression y = 2x per epoch."""

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Linear(1, 1, bias=False)

    def steps_per_epoch(self):
        return 4

    def start_epoch(self, epoch):
        pass

    def batches(self, epoch):
        return [torch.tensor([[float(i + 1)]]) for i in range(4)]

    def loss(self, x):
        return ((self.model(x) - 2 * x) ** 2).mean()

    def epoch_stats(self):
        return {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_every_batch_of_fit_goes_through_step(tmp_path, monkeypatch):
    seen = []
    step = Trainer.step

    def counting(self, batch):
        loss = step(self, batch)
        seen.append((float(batch), loss))
        return loss

    monkeypatch.setattr(Trainer, "step", counting)
    config = TrainerConfig(epochs=2, optim=OptimConfig(lr=0.01, warmup_ratio=0.0), device="cpu", progress=False)
    history = Trainer(Pairs(), config, tmp_path).fit()
    assert [x for x, _ in seen] == [1.0, 2.0, 3.0, 4.0] * 2
    # the epoch's logged loss is the mean of the losses its steps returned
    assert [h["loss"] for h in history] == [np.mean([loss for _, loss in seen[:4]]),
                                            np.mean([loss for _, loss in seen[4:]])]
