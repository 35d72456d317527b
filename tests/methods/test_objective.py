import numpy as np
import pytest

from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.losses import build_loss
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.modules.dual_encoder import DualEncoder


def _objective(**sampling):
    ds = memorisation_task(n=256, length=6, vocab_size=500, seed=3)
    texts = ds.train.texts + ds.labels.texts
    encoder = build_encoder({"type": "bag", "dim": 16, "vocab_size": 600}, texts)
    queries, labels = encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts)
    cfg = SamplingConfig(batch_size=32, **sampling)
    return DualEncoderObjective(DualEncoder(encoder), build_loss("softmax"), queries, labels, ds.train.labels, cfg)


def test_refresh_epochs_follow_first_refresh_and_tau():
    obj = _objective(first_refresh=2, refresh_every=3)
    assert [e for e in range(10) if obj.is_refresh_epoch(e)] == [2, 5, 8]


def test_random_batches_before_first_refresh_then_clusters_of_scheduled_size():
    obj = _objective(first_refresh=1, refresh_every=1, cluster_size=8, cluster_growth=2.0, cluster_max=16)
    obj.start_epoch(0)
    assert obj.clusters is None
    obj.start_epoch(1)
    assert sorted(len(c) for c in obj.clusters) == [8] * 32  # 256 queries in clusters of 8
    batches = obj.batches(1)
    assert sorted(np.concatenate([b[2] for b in batches]).tolist()) == list(range(256))
    obj.start_epoch(2)
    assert {len(c) for c in obj.clusters} == {16}  # the schedule doubled the size


def test_hard_negatives_are_never_positives_and_pool_masks_are_exact():
    obj = _objective(first_refresh=0, refresh_every=1, hard_negatives=3, clustered=False)
    obj.start_epoch(0)
    assert obj.negatives is not None and obj.negatives.shortlist.shape == (256, 3)
    assert not np.any(obj.negatives.shortlist == np.arange(256)[:, None])  # label i is query i's positive
    for item in obj.batches(0)[:3]:
        batch = obj.make_batch(item)
        dense = obj.y.toarray()[batch.query_ids][:, batch.label_ids] > 0
        assert np.array_equal(batch.positives, dense)
        assert len(batch.label_ids) > len(batch.query_ids)  # hard negatives joined the pool


def test_loss_backpropagates_and_state_round_trips():
    obj = _objective(first_refresh=0, refresh_every=1, hard_negatives=2)
    obj.start_epoch(0)
    loss = obj.loss(obj.batches(0)[0])
    loss.backward()
    assert loss.item() > 0 and obj.net.encoder.embedding.weight.grad is not None
    assert set(obj.epoch_stats()) == {"avg_pool_size", "avg_positives_in_pool"}
    other = _objective()
    other.load_state_dict(obj.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(other.clusters, obj.clusters, strict=False))
    assert np.array_equal(other.negatives.shortlist, obj.negatives.shortlist)


def test_batches_are_deterministic():
    a, b = _objective(first_refresh=0), _objective(first_refresh=0)
    a.start_epoch(0), b.start_epoch(0)
    for x, y in zip(a.batches(0), b.batches(0), strict=False):
        assert np.array_equal(a.make_batch(x).label_ids, b.make_batch(y).label_ids)


def test_mismatched_inputs_are_rejected():
    obj = _objective()
    with pytest.raises(ValueError, match="label matrix"):
        DualEncoderObjective(obj.net, obj.loss_fn, obj.queries[np.arange(10)], obj.labels, obj.y, obj.cfg)
