"""Per-prefix learning rates (UniDEC Sec. 4: encoder, heads and classifier table at their own rates) for dense
parameters (AdamW) and sparse tables (SparseAdam)."""

import pytest
import torch
from torch import nn

from xdex.modules import UniDECNet
from xdex.train import OptimConfig
from xdex.train.optim import build_optimizers, build_schedulers


def toy_model():
    torch.manual_seed(0)
    net = nn.ModuleDict({
        "encoder": nn.ModuleDict({"embedding": nn.EmbeddingBag(10, 3, mode="sum", sparse=True),
                                  "projection": nn.Linear(3, 3)}),
        "de_head": nn.Linear(3, 2),
        "classifier": nn.Embedding(6, 3, sparse=True),
    })
    return nn.ModuleDict({"net": net})


def groups(optimizer):
    """{lr: sorted parameter shapes} of an optimiser, plus the weight decay of dense groups."""
    return sorted((g["lr"], g.get("weight_decay"), sorted(tuple(p.shape) for p in g["params"]))
                  for g in optimizer.param_groups)


def test_a_sparse_table_gets_its_group_lr_and_the_others_lr_sparse():
    cfg = OptimConfig(lr=1e-3, lr_sparse=1e-2, weight_decay=0.01,
                      group_lr={"net.classifier": 0.05, "net.de_head": 2e-4})
    dense, sparse = build_optimizers(toy_model(), cfg)
    assert isinstance(dense, torch.optim.AdamW) and isinstance(sparse, torch.optim.SparseAdam)
    assert groups(sparse) == [(0.01, None, [(10, 3)]), (0.05, None, [(6, 3)])]
    assert groups(dense) == [
        (2e-4, 0.0, [(2,)]),  # de_head bias: its prefix's lr, no decay
        (2e-4, 0.01, [(2, 3)]),  # de_head weight
        (1e-3, 0.0, [(3,)]),  # projection bias: lr
        (1e-3, 0.01, [(3, 3)]),  # projection weight
    ]


def test_the_first_matching_prefix_wins():
    cfg = OptimConfig(lr=1e-3, lr_sparse=1e-2, group_lr={"net.classifier": 0.05, "net": 0.1})
    dense, sparse = build_optimizers(toy_model(), cfg)
    assert [g[0] for g in groups(sparse)] == [0.05, 0.1]  # classifier 0.05, the encoder table 0.1
    assert {g[0] for g in groups(dense)} == {0.1}


def test_first_sparse_adam_step_moves_each_table_by_its_own_lr():
    model = toy_model()
    cfg = OptimConfig(lr=1e-3, lr_sparse=1e-2, group_lr={"net.classifier": 0.05})
    optimizers = build_optimizers(model, cfg)
    net = model["net"]
    table, classifier = net["encoder"]["embedding"].weight, net["classifier"].weight
    before_table, before_clf = table.detach().clone(), classifier.detach().clone()
    # gradient 1 on every entry of rows 1 and 4 of Ψ and rows 2 and 7 of the token table
    (net["classifier"](torch.tensor([1, 4])).sum()
     + net["encoder"]["embedding"](torch.tensor([2, 7]), torch.tensor([0])).sum()).backward()
    for opt in optimizers:
        opt.step()
    # Adam's first step is lr · m̂ / (√v̂ + ε) = lr · g / (|g| + ε) ≈ lr against the gradient's sign
    step_clf = (before_clf - classifier.detach())
    step_table = (before_table - table.detach())
    torch.testing.assert_close(step_clf[[1, 4]], torch.full((2, 3), 0.05), atol=1e-6, rtol=0)
    torch.testing.assert_close(step_table[[2, 7]], torch.full((2, 3), 0.01), atol=1e-6, rtol=0)
    assert not step_clf[[0, 2, 3, 5]].any() and not step_table[[0, 1, 3, 4, 5, 6, 8, 9]].any()


def test_schedules_scale_every_group_alike():
    cfg = OptimConfig(lr=1e-3, lr_sparse=1e-2, warmup_ratio=0.5, schedule="linear",
                      group_lr={"net.classifier": 0.05})
    optimizers = build_optimizers(toy_model(), cfg)
    schedulers = build_schedulers(optimizers, total_steps=4, cfg=cfg)
    # step 0 of 4 with 2 warm-up steps: factor (0 + 1) / 2
    assert sorted(schedulers[1].get_last_lr()) == pytest.approx([0.005, 0.025])
    assert sorted(schedulers[0].get_last_lr()) == pytest.approx([0.0005, 0.0005])


def test_unidec_classifier_table_is_addressed_by_its_parameter_name(tmp_path):
    from xdex.encoders import BagOfEmbeddings
    from xdex.text import Tokenizer

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "a", "b"]) + "\n")
    encoder = BagOfEmbeddings(Tokenizer.from_pretrained_dir(tmp_path), 4, weighting="learned", sparse=True)
    model = nn.ModuleDict({"net": UniDECNet(encoder, 3, n_labels=5)})
    cfg = OptimConfig(lr=1e-4, lr_sparse=1e-2,
                      group_lr={"net.classifier": 1e-3, "net.de_head": 2e-4, "net.clf_head": 2e-4})
    dense, sparse = build_optimizers(model, cfg)
    # Ψ (5 x 3) at 1e-3; the encoder's token table (4 x 4) and learned token weights (4 x 1) at lr_sparse
    assert groups(sparse) == [(0.001, None, [(5, 3)]), (0.01, None, [(4, 1), (4, 4)])]
    assert groups(dense) == [(2e-4, 0.0, [(3,), (3,)]), (2e-4, 0.01, [(3, 4), (3, 4)])]
