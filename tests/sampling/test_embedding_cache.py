import numpy as np
import pytest
import scipy.sparse as sp
import torch

from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.losses import DecoupledSoftmax, SoftTopK, build_loss
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.modules.dual_encoder import DualEncoder
from xdex.sampling.embedding_cache import EmbeddingCache


def test_decoupled_softmax_picks_the_top_scored_negatives_outside_positives_and_pool():
    # q = e1 against labels e1 (positive), (0.8, 0.6), e2, -e1: S = [1, 0.8, 0, -1]. For DecoupledSoftmax
    # ∂ℓ/∂s_j = σ(lse_neg − s_0) e^{s_j − lse_neg} for a negative j, largest for the largest score.
    cache = EmbeddingCache(torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]]))
    q = torch.tensor([[1.0, 0.0]])
    positives = sp.csr_matrix([[1, 0, 0, 0]])
    loss = DecoupledSoftmax(temperature=1.0)
    assert cache.hardest(loss, q, positives, np.array([], np.int64), 2).tolist() == [[1, 2]]
    assert cache.hardest(loss, q, positives, np.array([1]), 2).tolist() == [[2, 3]]  # label 1 is in the pool
    assert cache.hardest(loss, q, positives, np.array([1, 2]), 3).tolist() == [[3, -1, -1]]  # nothing else left


def test_soft_top_k_picks_the_negatives_nearest_the_threshold():
    # S = [0 (positive), 6, 1, -1, 2], k = 2, α = 2, τ = 1: the threshold is t = -1.5611 and z = σ(2(s + t)) =
    # [0.0422, 0.9999, 0.2456, 0.0059, 0.7064]. By Eq. 7 |∂ℓ/∂s_j| ∝ v_j = 2 z_j (1 − z_j) for a negative j:
    # v = [., 0.00028, 0.371, 0.0118, 0.415], so label 4 then label 2, and label 1 (scored 6, safely in the
    # top k) comes last.
    scores = [0.0, 6.0, 1.0, -1.0, 2.0]
    cache = EmbeddingCache(torch.tensor([[s, 0.0] for s in scores]))
    q = torch.tensor([[1.0, 0.0]])
    mined = cache.hardest(SoftTopK(k=2, temperature=1.0), q, sp.csr_matrix([[1, 0, 0, 0, 0]]), np.array([]), 4)
    assert mined.tolist() == [[4, 2, 3, 1]]


def test_update_overwrites_rows_without_graph():
    cache = EmbeddingCache(torch.zeros(4, 2))
    fresh = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True) * 1
    cache.update(np.array([3, 1]), fresh)
    assert cache.vectors.tolist() == [[0, 0], [3, 4], [0, 0], [1, 2]] and not cache.vectors.requires_grad


def test_each_query_gets_its_own_negatives():
    cache = EmbeddingCache(torch.eye(3))
    queries = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    positives = sp.csr_matrix([[1, 0, 0], [1, 0, 0]])
    assert cache.hardest(DecoupledSoftmax(), queries, positives, np.array([]), 1).tolist() == [[1], [2]]
    with pytest.raises(ValueError, match="positive"):
        cache.hardest(DecoupledSoftmax(), queries, positives, np.array([]), 0)
    with pytest.raises(ValueError, match="per-row"):
        cache.hardest(build_loss("symmetric", q2l="paln"), queries, positives, np.array([]), 1)


def test_pool_objective_adds_cache_negatives_to_the_pool():
    ds = memorisation_task(n=128, length=6, vocab_size=400, seed=5)
    encoder = build_encoder({"type": "bag", "dim": 16, "vocab_size": 500}, ds.train.texts + ds.labels.texts)
    cfg = SamplingConfig(batch_size=16, clustered=False, cache_negatives=3)
    obj = DualEncoderObjective(DualEncoder(encoder), DecoupledSoftmax(), encoder.tokenize(ds.train.texts),
                               encoder.tokenize(ds.labels.texts), ds.train.labels, cfg)
    obj.start_epoch(0)
    item = obj.batches(0)[0]
    batch = obj.make_batch(item)
    q = obj.net(obj.queries[batch.query_ids])
    z = obj.net(obj.labels[batch.label_ids])
    pooled, z_pooled = obj.add_cache_negatives(batch, q, z)
    assert obj.cache.vectors.shape == (128, 16)
    assert torch.allclose(obj.cache.vectors[batch.label_ids], z.detach())  # the pool's rows hold fresh embeddings
    expected = obj.cache.hardest(obj.loss_fn, q, obj.y[batch.query_ids], batch.label_ids, 3)
    extra = np.setdiff1d(pooled.label_ids, batch.label_ids)
    assert np.array_equal(extra, np.unique(expected)) and len(extra) > 0
    assert np.all(np.diff(pooled.label_ids) > 0)  # sorted, unique
    assert np.array_equal(pooled.positives, obj.y[batch.query_ids][:, pooled.label_ids].toarray() > 0)
    assert torch.allclose(z_pooled, obj.net(obj.labels[pooled.label_ids]), atol=1e-6)
    loss = obj.loss(obj.batches(0)[1])
    loss.backward()
    assert loss.item() > 0 and obj.net.encoder.embedding.weight.grad is not None
    assert obj.epoch_stats()["avg_pool_size"] > 16
