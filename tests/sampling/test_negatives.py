import numpy as np
import scipy.sparse as sp

from xdex.sampling import HardNegatives

Y = sp.csr_matrix(np.array([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))


def test_shortlist_drops_positives_and_padding_keeps_order():
    search = np.array([[0, 2, 3, 4], [1, 0, -1, 3], [4, 3, 2, 1]])
    hn = HardNegatives.from_search(search, Y, shortlist_size=3)
    assert hn.shortlist.tolist() == [[2, 3, -1], [0, 3, -1], [4, 3, 2]]


def test_sample_is_uniform_without_replacement_and_never_positive():
    hn = HardNegatives(np.array([[2, 3, -1], [0, 3, 4]]))
    rng = np.random.default_rng(0)
    seen = np.zeros(5)
    for _ in range(2000):
        out = hn.sample(np.array([0, 1]), eta=2, rng=rng)
        assert sorted(out[0].tolist()) == [2, 3]
        assert len(set(out[1].tolist())) == 2 and set(out[1].tolist()) <= {0, 3, 4}
        seen[out[1]] += 1
    # each of the 3 shortlisted labels of query 1 drawn 2/3 of the time
    assert np.all(np.abs(seen[[0, 3, 4]] / 2000 - 2 / 3) < 0.05)


def test_sample_pads_short_lists():
    hn = HardNegatives(np.array([[2, -1, -1]]))
    out = hn.sample(np.array([0]), eta=3, rng=np.random.default_rng(0))
    assert out.tolist() == [[2, -1, -1]]
