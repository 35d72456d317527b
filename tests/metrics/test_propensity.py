import math

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.metrics import PRESETS, inverse_propensity, parse_propensity


def test_formula_by_hand():
    # N = 4 training documents; label 0 in 3 of them, label 1 in 1, label 2 in none
    train = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]]))
    q = inverse_propensity(train, A=0.55, B=1.5)
    # C = (ln 4 - 1) * 2.5^0.55 = 0.386294 * 1.655263 = 0.639419
    c = (math.log(4) - 1) * 2.5**0.55
    assert c == pytest.approx(0.6394187592)
    # q_0 = 1 + C * 4.5^-0.55 = 1 + 0.639419 * 0.437253 = 1.279588
    assert q[0] == pytest.approx(1 + c * 4.5**-0.55)
    assert q[0] == pytest.approx(1.2795879849)
    # with N_l = 1 the (B + 1)^A factors cancel: q = 1 + ln N - 1 = ln 4
    assert q[1] == pytest.approx(math.log(4))
    # q_2 = 1 + C * 1.5^-0.55 = 1 + 0.639419 * 0.800110
    assert q[2] == pytest.approx(1 + c * 1.5**-0.55)
    assert q.shape == (3,) and q.dtype == np.float64


def test_counts_documents_not_relevance_values():
    graded = sp.csr_matrix(np.array([[3.0, 0.0], [1.0, -1.0]]))
    binary = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 0.0]]))
    np.testing.assert_allclose(inverse_propensity(graded), inverse_propensity(binary))


def test_presets_and_parsing():
    assert PRESETS == {"default": (0.55, 1.5), "amazon": (0.6, 2.6), "wikipedia": (0.5, 0.4)}
    assert parse_propensity("Amazon") == (0.6, 2.6)
    assert parse_propensity("0.5, 0.4") == (0.5, 0.4)
    assert parse_propensity((1, 2)) == (1.0, 2.0)
    for bad in ("amazonia", "1", "1,2,3", "a,b"):
        with pytest.raises(ValueError, match="expected one of default, amazon, wikipedia"):
            parse_propensity(bad)
    with pytest.raises(ValueError, match="B > 0"):
        parse_propensity("0.5,0")


def test_rejects_empty_training_set_and_bad_b():
    with pytest.raises(ValueError, match="at least one training document"):
        inverse_propensity(sp.csr_matrix((0, 3)))
    with pytest.raises(ValueError, match="B must be > 0"):
        inverse_propensity(sp.csr_matrix(np.eye(3)), B=0.0)
