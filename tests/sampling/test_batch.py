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
