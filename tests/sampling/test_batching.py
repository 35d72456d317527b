import numpy as np
import pytest

from xdex.sampling import ClusterSchedule, QueryBatcher


def test_random_epoch_is_a_permutation_and_reproducible():
    qb = QueryBatcher(10, batch_size=4, seed=7)
    batches = qb.epoch(0)
    assert [len(b) for b in batches] == [4, 4, 2] and len(qb) == 3
    assert sorted(np.concatenate(batches).tolist()) == list(range(10))
    assert all(np.array_equal(a, b) for a, b in zip(batches, QueryBatcher(10, 4, seed=7).epoch(0), strict=False))
    assert not all(np.array_equal(a, b) for a, b in zip(batches, qb.epoch(1), strict=False))


def test_clustered_batches_keep_clusters_together():
    clusters = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5]), np.array([6, 7])]
    qb = QueryBatcher(8, batch_size=4, seed=0)
    for epoch in range(5):
        for batch in qb.epoch(epoch, clusters):
            ids = {int(q) // 2 for q in batch}
            assert len(ids) == 2  # two whole clusters per batch


def test_drop_last():
    qb = QueryBatcher(10, batch_size=4, drop_last=True)
    assert [len(b) for b in qb.epoch(0)] == [4, 4] and len(qb) == 2


def test_cluster_schedule_grows_and_caps():
    s = ClusterSchedule(initial=4, growth=2, maximum=16)
    assert [s.size(r) for r in range(5)] == [4, 8, 16, 16, 16]
    assert s.num_clusters(1000, 0) == 256  # 1000 / 4 = 250 -> next power of two
    with pytest.raises(ValueError):
        QueryBatcher(5, 0)
