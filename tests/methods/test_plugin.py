"""A sixth method, added from this file alone: a recipe section, a network, an objective and two stages plugged
into the one training pipeline, without touching any file of ``src/xdex/methods``.

The toy method is a dual encoder with a per-label bias: score(x, l) = N(E(x))·N(E(z_l)) + b_l, searched as the
inner product of [N(E(x)), 1] and [N(E(z_l)), b_l]. A stage before the fit starts b_l at the label's prior,
w·log(1 + n_l) / log(1 + max n); a stage after it records the learnt biases' range in the model's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ranking_asserts import assert_same_ranking
from torch import nn

import xdex
from xdex.encoders.factory import load_encoder
from xdex.losses import build_loss
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.plugin import PLUGINS, Plugin, Run, active_plugins, register, unregister
from xdex.methods.popularity import PopularityBaseline
from xdex.methods.recipe import RECIPES, load_recipe, register_recipe
from xdex.methods.schema import SECTIONS
from xdex.metrics import Ranking, evaluate_predictions
from xdex.modules import NETWORKS, DualEncoder, register_network
from xdex.modules.heads_storage import read_heads, write_heads
from xdex.train.distributed import encode_sharded


@dataclass
class BiasSection:
    """The ``bias`` section of the toy recipe."""

    prior_weight: float = 0.2  # w of the starting bias


class BiasNet(DualEncoder):
    """A dual encoder with one learnt bias per trained label (module docstring)."""

    search_modes = ("de",)

    def __init__(self, encoder, n_labels: int):
        super().__init__(encoder)
        self.bias = nn.Parameter(torch.zeros(n_labels))

    @torch.no_grad()
    def query_vectors(self, tokens, batch_size: int = 512) -> torch.Tensor:
        x = self.embed(tokens, batch_size)
        return torch.cat([x, torch.ones(len(x), 1)], dim=1)

    @torch.no_grad()
    def label_vectors(self, tokens, batch_size: int = 512) -> torch.Tensor:
        return torch.cat([self.embed(tokens, batch_size), self.bias.detach().float().cpu()[:, None]], dim=1)

    @torch.no_grad()
    def new_label_vectors(self, tokens, batch_size: int = 512) -> torch.Tensor:
        z = self.embed(tokens, batch_size)  # a label added by its text has no bias yet
        return torch.cat([z, torch.zeros(len(z), 1)], dim=1)

    def save_heads(self, folder: str | Path) -> None:
        write_heads(folder, self.kind, {"bias": self.bias.detach().float()}, {"n_labels": len(self.bias)})

    @classmethod
    def load(cls, folder: str | Path, parts: Mapping[str, Any] | None = None) -> BiasNet:
        config, tables = read_heads(folder, cls.kind)
        net = cls(load_encoder(Path(folder) / "encoder"), int(config["n_labels"]))
        net.bias.data.copy_(tables["bias"])
        return net


class BiasObjective(DualEncoderObjective):
    """NGAME's batches and label pools; the pool's scores carry the labels' biases."""

    def loss(self, item):
        batch = self.make_batch(item)
        self.pool_stats.add(batch)
        q = encode_sharded(self.net, self.queries, batch.query_ids)
        z = encode_sharded(self.net, self.labels, batch.label_ids)
        scores = q @ z.T + self.net.bias[torch.from_numpy(batch.label_ids)]
        return self.loss_fn(scores, torch.from_numpy(batch.positives))


def build(run: Run):
    encoder, queries, labels = run.inputs()
    net = BiasNet(encoder, run.train_labels.shape[1])
    objective = BiasObjective(net, build_loss(**run.config.loss), queries, labels, run.train_labels,
                              run.config.sampling, run.config.trainer.seed)
    return net, objective


def start_at_the_prior(run: Run) -> None:
    counts = np.asarray(run.train_labels.sum(axis=0)).ravel()
    prior = run.config.section("bias").prior_weight * np.log1p(counts) / np.log1p(counts.max())
    run.net.bias.data.copy_(torch.from_numpy(prior.astype(np.float32)))
    run.shared["prior"] = prior


def record_the_biases(run: Run) -> None:
    bias = run.net.bias.detach().numpy()
    run.meta["bias_range"] = [round(float(bias.min()), 4), round(float(bias.max()), 4)]
    run.meta["bias_moved"] = bool(np.abs(bias - run.shared["prior"]).max() > 1e-4)


TOY_RECIPE = """\
method: toy
bias:
  prior_weight: 0.2
loss: {name: triplet, margin: 0.3, num_negatives: 10}
trainer: {epochs: 4, eval_every: 2}
"""


@pytest.fixture(scope="module")
def toy_method(tmp_path_factory):
    """The sixth method, registered for this module's tests and removed afterwards."""
    recipe = tmp_path_factory.mktemp("recipes") / "toy.yaml"
    recipe.write_text(TOY_RECIPE)
    register_network("bias")(BiasNet)
    register(Plugin("bias", BiasSection, build=build, before_fit=(start_at_the_prior,),
                    after_fit=(record_the_biases,)))
    register_recipe("toy", recipe)
    yield
    unregister("bias")
    NETWORKS.pop("bias")
    RECIPES.pop("toy")


@pytest.fixture(scope="module")
def trained(toy_method, tmp_path_factory):
    out = tmp_path_factory.mktemp("toy") / "model"
    return xdex.Model.train("demo", recipe="toy", out=out, trainer__progress=False, overrides=["ranker=null"]), out


def test_the_toy_recipe_is_the_defaults_with_its_own_section(toy_method):
    cfg = load_recipe("toy", overrides=["bias.prior_weight=0.5"])
    assert cfg.method == "toy" and cfg.section("bias") == BiasSection(prior_weight=0.5)
    assert cfg.to_dict()["bias"] == {"prior_weight": 0.5} and cfg.sampling.batch_size == 256
    with pytest.raises(ValueError, match=r"bias\.prior_weigth"):
        load_recipe("toy", overrides=["bias.prior_weigth=0.5"])


def test_the_toy_method_trains_end_to_end_and_beats_popularity(trained):
    model, out = trained
    demo = xdex.data.load("demo")
    assert isinstance(model.net, BiasNet) and model.meta["method"] == "toy"
    assert model.meta["bias_moved"] and model.meta["bias_range"][1] > 0  # both stages ran on the trained net
    ids, scores = PopularityBaseline().fit(demo.train.labels).predict(len(demo.test), 50)
    baseline = evaluate_predictions(Ranking(ids, scores), demo)
    metrics = evaluate_predictions(model.predict(demo.test.texts, 50), demo)
    assert metrics["P@1"] > 2 * baseline["P@1"] and metrics["PSP@5"] > 4 * baseline["PSP@5"]


def test_the_toy_model_directory_loads_through_the_network_registry(trained):
    model, out = trained
    again = xdex.Model.load(out)
    assert isinstance(again.net, BiasNet)
    torch.testing.assert_close(again.net.bias, model.net.bias)
    texts = xdex.data.load("demo").test.texts[:40]
    a, b = model.predict(texts, 10), again.predict(texts, 10)
    assert_same_ranking(a.indices, a.scores, b.indices, b.scores)
    key = again.add_labels(["a label added by its text"])[0]
    assert again.predict(["a label added by its text"], 1).labels[0][0].key == key


def test_the_plug_in_leaves_no_trace_once_removed(toy_method):
    assert "bias" in PLUGINS and "bias" in SECTIONS
    unregister("bias")
    try:
        assert "bias" not in PLUGINS and "bias" not in SECTIONS
        with pytest.raises(ValueError, match="unknown config key"):
            load_recipe("toy")
    finally:
        register(Plugin("bias", BiasSection, build=build, before_fit=(start_at_the_prior,),
                        after_fit=(record_the_biases,)))


def test_two_plug_ins_that_build_the_network_are_refused(toy_method):
    cfg = load_recipe("toy", overrides=["heads.dim=8"])
    with pytest.raises(ValueError, match="heads and bias each build the network"):
        active_plugins(cfg)
