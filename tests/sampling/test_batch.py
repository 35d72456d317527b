import numpy as np
import scipy.sparse as sp

from xdex.sampling import build_batch, positives_mask, sample_positives

# query 0: labels {0, 1, 4}; query 1: {1, 2}; query 2: none; query 3: {0, 3}
Y = sp.csr_matrix(
    np.array([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 1, 0]], dtype=np.float32)
)


def test_positives_mask_marks_every_positive_in_pool():
    mask = positives_mask(Y, np.array([0, 1, 3]), np.array([1, 2, 3]))
    assert mask.tolist() == [[True, False, False], [True, True, False], [False, False, True]]


def test_sample_positives_respects_beta_and_membership():
    rng = np.random.default_rng(0)
    for beta in (1, 2, 5):
        picked = sample_positives(Y, np.array([0, 1, 2, 3]), beta, rng)
        assert len(picked) == min(beta, 3) + min(beta, 2) + 0 + min(beta, 2)
    # beta >= row size returns every positive
    assert sorted(sample_positives(Y, np.array([0]), 10, rng).tolist()) == [0, 1, 4]


def test_sample_positives_is_uniform():
    rng = np.random.default_rng(1)
    counts = np.zeros(5)
    for _ in range(3000):
        counts[sample_positives(Y, np.array([0]), 1, rng)] += 1
    # each of labels 0, 1, 4 about 1000 times
    assert np.all(np.abs(counts[[0, 1, 4]] - 1000) < 120) and counts[[2, 3]].sum() == 0


def test_batch_pool_contains_extra_positives_and_no_positive_is_a_negative():
    rng = np.random.default_rng(3)
    for _ in range(50):
        negs = rng.integers(0, 5, size=(4, 2))
        b = build_batch(Y, np.arange(4), rng, beta=1, negatives=negs)
        assert np.all(np.diff(b.label_ids) > 0)
        dense = Y.toarray()[b.query_ids][:, b.label_ids] > 0
        # the mask is exactly P_i ∩ L_B: extra positives brought by other queries are marked,
        # and every unmarked pool entry is a true negative of the query
        assert np.array_equal(b.positives, dense)


def test_avg_positives_in_pool():
    b = build_batch(Y, np.array([0, 1]), np.random.default_rng(0), beta=3)
    # pool = {0, 1, 2, 4}: query 0 has 3 positives in it, query 1 has 2
    assert b.label_ids.tolist() == [0, 1, 2, 4]
    assert b.avg_positives_in_pool == 2.5


def test_pool_stats_average_pool_size_and_positives_in_pool():
    from xdex.sampling import Batch, PoolStats

    stats = PoolStats()
    assert stats.summary() == {}
    stats.add(Batch(np.array([0, 1]), np.array([3, 5, 7]), np.array([[1, 0, 0], [1, 1, 0]], dtype=bool)))
    stats.add(Batch(np.array([2]), np.array([4]), np.array([[1]], dtype=bool)))
    # pools of 3 and 1 labels; positives in pool per query: (1 + 2) / 2 = 1.5, then 1
    assert stats.summary() == {"avg_pool_size": 2.0, "avg_positives_in_pool": 1.25}
    stats.reset()
    assert stats.summary() == {}


def test_seeded_batch_depends_only_on_its_key():
    from xdex.sampling import HardNegatives, seeded_batch

    y = sp.csr_matrix(np.array([[1, 1, 0, 0, 0], [0, 0, 1, 0, 0]], dtype=np.float32))
    shortlists = HardNegatives(np.array([[2, 3, 4], [0, 3, 4]]))
    a = seeded_batch(y, np.array([0, 1]), [7, 0, 3, 1], beta=1, shortlists=shortlists, eta=2)
    b = seeded_batch(y, np.array([0, 1]), [7, 0, 3, 1], beta=1, shortlists=shortlists, eta=2)
    assert a.label_ids.tolist() == b.label_ids.tolist() and (a.positives == b.positives).all()
    assert len(a.label_ids) <= 2 * (1 + 2)
    plain = seeded_batch(y, np.array([0, 1]), [7, 0, 3, 1], beta=1, shortlists=shortlists, eta=0)
    assert set(plain.label_ids) <= {0, 1, 2}  # no negatives without η: only sampled positives
