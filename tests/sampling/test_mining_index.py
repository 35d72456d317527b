"""``sampling.mining_index``: the recipe setting that chooses how hard negatives are searched."""

import numpy as np
import pytest
import torch

from xdex.config import ConfigError
from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.index.recall import recall_at_k
from xdex.losses import build_loss
from xdex.methods.objective import DualEncoderObjective
from xdex.methods.recipe import load_recipe
from xdex.methods.schema import MiningIndexConfig, SamplingConfig
from xdex.modules.dual_encoder import DualEncoder


def test_the_default_is_auto_and_hnsw_settings_follow_the_index_section():
    mining = load_recipe("unidec").sampling.mining_index
    assert mining.kind == "auto" and mining.settings() == {"index": "auto", "M": 16, "ef_construction": 32,
                                                           "ef_search": 128}
    exact = load_recipe("unidec", overrides=["sampling.mining_index.kind=exact"]).sampling.mining_index
    assert exact.settings() == {"index": "exact"}
    hnsw = load_recipe("unidec", overrides=["sampling.mining_index.kind=hnsw", "sampling.mining_index.M=8"])
    assert hnsw.sampling.mining_index.settings() == {"index": "hnsw", "M": 8, "ef_construction": 32,
                                                     "ef_search": 128}


@pytest.mark.parametrize(("override", "message"), [
    ("sampling.mining_index.kind=annoy",
     r"sampling\.mining_index\.kind: 'annoy' is not one of 'auto', 'exact', 'hnsw'"),
    ("sampling.mining_index.M=1", r"sampling\.mining_index\.M must be an integer of at least 2, got 1"),
    ("sampling.mining_index.ef_search=0", r"sampling\.mining_index\.ef_search must be an integer of at least 1"),
    ("sampling.mining_index.ef_construction=lots", r"sampling\.mining_index\.ef_construction: expected int"),
    ("sampling.mining_index.ef=64", r"unknown config key\(s\) sampling\.mining_index\.ef; valid keys"),
    ("sampling.mining_index=hnsw", r"sampling\.mining_index: expected a mapping"),
])
def test_a_bad_mining_index_is_refused_naming_the_setting(override, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe("unidec", overrides=[override])


def test_a_bad_mining_index_is_refused_from_python_too():
    with pytest.raises(ConfigError, match="sampling.mining_index.M"):
        MiningIndexConfig(kind="hnsw", M=0)


def _objective(kind: str) -> DualEncoderObjective:
    torch.manual_seed(0)
    ds = memorisation_task(n=400, length=6, vocab_size=500, seed=3)
    encoder = build_encoder({"type": "bag", "dim": 16, "vocab_size": 600}, ds.train.texts + ds.labels.texts)
    queries, labels = encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts)
    cfg = SamplingConfig(batch_size=32, first_refresh=0, refresh_every=1, hard_negatives=3, clustered=False,
                         mining_index=MiningIndexConfig(kind=kind, ef_search=16))
    return DualEncoderObjective(DualEncoder(encoder), build_loss("softmax"), queries, labels, ds.train.labels, cfg)


def test_a_refresh_mines_with_the_configured_index():
    exact, hnsw = _objective("exact"), _objective("hnsw")
    exact.start_epoch(0)
    hnsw.start_epoch(0)  # the same seeds: the same network and vectors, 400 labels against ef_search = 16
    shortlist = hnsw.negatives.shortlist
    assert shortlist.shape == exact.negatives.shortlist.shape == (400, 3)
    assert shortlist.min() >= 0 and not np.any(shortlist == np.arange(400)[:, None])  # label i: query i's positive
    assert recall_at_k(shortlist, exact.negatives.shortlist, 3) > 0.5  # typically 0.99: the same vectors, searched
    # approximately
