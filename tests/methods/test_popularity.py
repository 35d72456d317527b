import numpy as np
import pytest
import scipy.sparse as sp

from xdex.methods.popularity import PopularityBaseline


def test_ranks_by_training_frequency_with_ties_by_lower_id():
    # label counts: 0 -> 1, 1 -> 3, 2 -> 3, 3 -> 0
    y = sp.csr_matrix(np.array([[1, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]], dtype=np.float32))
    ids, scores = PopularityBaseline().fit(y).predict(n_documents=2, k=3)
    assert ids.tolist() == [[1, 2, 0], [1, 2, 0]]
    assert scores.tolist() == [[3, 3, 1], [3, 3, 1]]


def test_k_larger_than_label_count_is_clipped():
    y = sp.csr_matrix(np.eye(2, dtype=np.float32))
    ids, _ = PopularityBaseline().fit(y).predict(1, k=10)
    assert ids.tolist() == [[0, 1]]


def test_predict_before_fit_raises():
    with pytest.raises(RuntimeError):
        PopularityBaseline().predict(1, 1)
