"""Training steps over sparse embedding tables: the bag encoder's one pass over a step's queries and labels with
distinct-token lookups, and RowSparseAdam, train as a pass per part with the table's own bag (one gradient row per
token occurrence) under torch's SparseAdam did (the same losses and parameters, up to the order of float sums)."""

import numpy as np
import pytest
import torch

from xdex.data.synthetic import memorisation_task
from xdex.encoders import BagOfEmbeddings, build_encoder
from xdex.methods.pipeline import build_objective, trainer_settings
from xdex.methods.recipe import load_recipe
from xdex.train import Trainer, sparse_adam
from xdex.train import optim as optim_module
from xdex.train.optim import build_schedulers

SMALL = ["encoder.dim=16", "encoder.vocab_size=300", "encoder.max_length=8", "heads.dim=8", "sampling.batch_size=16",
         "sampling.hard_negatives=3"]


def per_occurrence_bag(self, ids, offsets):
    """The bag as the table computes it itself: its sparse gradient holds one row per token occurrence."""
    weights = self.token_weights(ids)
    return self.embedding(ids, offsets, per_sample_weights=weights), weights


def train_steps(tmp_path, steps=6, weighting="learned"):
    """Losses, first and last parameters of ``steps`` steps of the `unidec` recipe (hard negatives in the pools)."""
    data = memorisation_task(n=120, length=6, vocab_size=60, seed=3)
    config = load_recipe("unidec", overrides=[*SMALL, f"encoder.weighting={weighting}"])
    torch.manual_seed(0)
    settings = {k: v for k, v in config.encoder.items() if v is not None}
    encoder = build_encoder(settings, data.train.texts + data.labels.texts)
    queries, labels = encoder.tokenize(data.train.texts), encoder.tokenize(data.labels.texts)
    _, objective = build_objective(config, encoder, queries, labels, data.train.labels)
    trainer = Trainer(objective, trainer_settings(config), workdir=tmp_path)
    trainer.model.train()
    trainer.optimizers = optim_module.build_optimizers(trainer.model, trainer.cfg.optim)
    trainer.schedulers = build_schedulers(trainer.optimizers, steps, trainer.cfg.optim)
    objective.refresh(0)
    batches = objective.batches(config.sampling.first_refresh)
    assert len(objective.make_batch(batches[0]).label_ids) > config.sampling.batch_size  # hard negatives joined
    first = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.manual_seed(1)
    losses = [trainer.step(batches[i % len(batches)]) for i in range(steps)]
    return losses, first, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("weighting", ["learned", "idf"])
def test_steps_train_as_with_one_gradient_row_per_token_occurrence(tmp_path, monkeypatch, weighting):
    ordered = []  # per sparse gradient: were its indices increasing already (no coalescing needed)?
    increasing = sparse_adam._strictly_increasing

    def spy(indices):
        ordered.append(increasing(indices))
        return ordered[-1]

    with monkeypatch.context() as m:
        m.setattr(sparse_adam, "_strictly_increasing", spy)
        losses, first, params = train_steps(tmp_path / "new", weighting=weighting)
    # every step's gradients of the token table, Ψ (and the learned weights) arrive with one row per index, sorted
    assert ordered == [True] * 6 * (3 if weighting == "learned" else 2)
    with monkeypatch.context() as m:
        m.setattr(BagOfEmbeddings, "_distinct_bag", per_occurrence_bag)
        m.setattr(BagOfEmbeddings, "joint_pass", False)  # a pass for the queries, another for the labels
        m.setattr(optim_module, "RowSparseAdam", torch.optim.SparseAdam)
        old_losses, old_first, old_params = train_steps(tmp_path / "old", weighting=weighting)
    np.testing.assert_allclose(losses, old_losses, rtol=1e-5)
    assert params.keys() == old_params.keys()
    for name, value in params.items():
        torch.testing.assert_close(value, old_params[name], rtol=1e-5, atol=1e-6, msg=name)
    for name, value in first.items():
        assert torch.equal(value, old_first[name]), name  # both runs started alike
    table = "net.encoder.embedding.weight"
    moved = (params[table] != first[table]).any(dim=1)
    assert 0 < int(moved.sum()) < len(moved)  # the steps moved the rows of the tokens they saw, not all
