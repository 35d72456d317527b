import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.metrics import Ranking, compute_metrics, hit_mask, inverse_propensity

LOG3 = math.log2(3)  # 1/log2(3) = 0.6309..., the discount of position 2


def truth_matrix(rows, n_labels):
    data, cols, indptr = [], [], [0]
    for row in rows:
        cols.extend(row)
        data.extend([1.0] * len(row))
        indptr.append(len(cols))
    return sp.csr_matrix((data, cols, indptr), shape=(len(rows), n_labels))


def ranking_of(rows):
    return Ranking.from_lists(rows, [[-float(j) for j in range(len(r))] for r in rows])


# doc0: truth {0, 2},    ranked [2, 1, 0]  -> hits at positions 1 and 3
# doc1: truth {1, 3, 5}, ranked [5, 4]     -> hit at position 1, position 3 is padding
# doc2: no labels,       ranked [0, 1, 2]  -> counts as 0 everywhere
TRUTH = truth_matrix([[0, 2], [1, 3, 5], []], 6)
RANKING = ranking_of([[2, 1, 0], [5, 4], [0, 1, 2]])
Q = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # q_l = l + 1


def test_precision_ndcg_recall_by_hand():
    m = compute_metrics(RANKING, TRUTH, ks=[1, 3], recall_ks=[1, 3])
    assert m["P@1"] == pytest.approx(100 * (1 + 1 + 0) / 3)  # 66.67
    assert m["P@3"] == pytest.approx(100 * (2 / 3 + 1 / 3 + 0) / 3)  # 33.33
    assert m["nDCG@1"] == pytest.approx(100 * (1 + 1 + 0) / 3)
    # doc0: DCG = 1 + 1/log2(4) = 1.5, IDCG (2 labels) = 1 + 1/log2(3) = 1.6309 -> 0.9197
    # doc1: DCG = 1, IDCG (3 labels) = 1 + 0.6309 + 0.5 = 2.1309 -> 0.4693
    assert m["nDCG@3"] == pytest.approx(100 * (1.5 / (1 + 1 / LOG3) + 1 / (1 + 1 / LOG3 + 0.5)) / 3)
    assert m["nDCG@3"] == pytest.approx(46.299983839)
    assert m["R@1"] == pytest.approx(100 * (1 / 2 + 1 / 3 + 0) / 3)  # 27.78
    assert m["R@3"] == pytest.approx(100 * (2 / 2 + 1 / 3 + 0) / 3)  # 44.44
    assert list(m) == ["P@1", "P@3", "nDCG@1", "nDCG@3", "R@1", "R@3"]


def test_propensity_scored_metrics_are_ratios_of_means():
    m = compute_metrics(RANKING, TRUTH, ks=[1, 3], inv_propensity=Q, recall_ks=[5])
    # PSP@1: numerator mean(q2=3, q5=6, 0) = 3; best mean(max{1,3}=3, max{2,4,6}=6, 0) = 3
    assert m["PSP@1"] == pytest.approx(100.0)
    # PSP@3: numerator mean((3+1)/3, 6/3, 0) = 10/9; best mean((3+1)/3, (6+4+2)/3, 0) = 16/9
    assert m["PSP@3"] == pytest.approx(100 * 10 / 16)  # 62.5, not a mean of per-document ratios
    # PSnDCG@3: each document's PSDCG and best PSDCG divided by its IDCG, then a ratio of means
    # doc0: PSDCG = 3 + 1/log2(4) = 3.5, best = 3 + 1/log2(3) = 3.6309, IDCG = 1.6309
    # doc1: PSDCG = 6, best = 6 + 4/log2(3) + 2/log2(4) = 9.5237, IDCG = 2.1309
    i0, i1 = 1 + 1 / LOG3, 1 + 1 / LOG3 + 0.5
    expected = (3.5 / i0 + 6 / i1) / ((3 + 1 / LOG3) / i0 + (6 + 4 / LOG3 + 1) / i1)
    assert m["PSnDCG@3"] == pytest.approx(100 * expected)
    assert m["PSnDCG@3"] == pytest.approx(74.10400048)
    assert list(m) == ["P@1", "P@3", "nDCG@1", "nDCG@3", "PSP@1", "PSP@3", "PSnDCG@1", "PSnDCG@3", "R@5"]


def test_positions_beyond_the_ranking_count_as_misses():
    # doc0 ranked [2, 1, 0] has 2 hits; at k = 5 that is 2/5, and recall 2/2
    m = compute_metrics(ranking_of([[2, 1, 0]]), truth_matrix([[0, 2]], 6), ks=[5])
    assert m["P@5"] == pytest.approx(40.0)
    assert m["R@5"] == pytest.approx(100.0)


def test_documents_without_labels_count_in_the_mean():
    truth = truth_matrix([[1], []], 3)
    m = compute_metrics(ranking_of([[1], [1]]), truth, ks=[1], inv_propensity=np.ones(3))
    # doc0 is perfect, doc1 has no labels: P@1 = nDCG@1 = R@1 = (1 + 0) / 2; PSP best is also (1 + 0) / 2
    assert m == pytest.approx({"P@1": 50.0, "nDCG@1": 50.0, "PSP@1": 100.0, "PSnDCG@1": 100.0, "R@1": 50.0})


def test_no_labels_at_all_gives_zero():
    m = compute_metrics(ranking_of([[0], [1]]), truth_matrix([[], []], 2), ks=[1], inv_propensity=np.ones(2))
    assert m == {"P@1": 0.0, "nDCG@1": 0.0, "PSP@1": 0.0, "PSnDCG@1": 0.0, "R@1": 0.0}


def test_relevance_is_binarised():
    # stored relevance 2.0 counts as 1, a stored 0 or negative value as not relevant
    truth = sp.csr_matrix(([2.0, 0.0, -1.0], [0, 1, 2], [0, 3]), shape=(1, 3))  # label 1: an explicit zero
    m = compute_metrics(ranking_of([[0, 1, 2]]), truth, ks=[3])
    assert m["P@3"] == pytest.approx(100 / 3)
    assert m["R@3"] == pytest.approx(100.0)
    assert m["nDCG@3"] == pytest.approx(100.0)


def test_hit_mask():
    assert hit_mask(RANKING, TRUTH, 2).tolist() == [[True, False], [True, False], [False, False]]


def test_bad_inputs():
    with pytest.raises(ValueError, match="rows"):
        compute_metrics(RANKING, TRUTH[:2], ks=[1])
    with pytest.raises(ValueError, match="label id 6"):
        compute_metrics(ranking_of([[6]]), truth_matrix([[0]], 6), ks=[1])
    with pytest.raises(ValueError, match="positive"):
        compute_metrics(RANKING, TRUTH, ks=[0])
    with pytest.raises(ValueError, match="inv_propensity"):
        compute_metrics(RANKING, TRUTH, ks=[1], inv_propensity=np.ones(5))


def reference_metrics(rows, truth_rows, k, q):
    """The formulas of the module docstring, one document at a time."""
    n = len(rows)
    p = ndcg = r = psp = psp_best = psn = psn_best = 0.0
    for ranked, true in zip(rows, truth_rows, strict=False):
        true = set(true)
        top = ranked[:k]
        gains = [1.0 if label in true else 0.0 for label in top]
        disc = [1 / math.log2(j + 2) for j in range(k)]
        ideal = sum(disc[: min(k, len(true))])
        best = sorted((q[label] for label in true), reverse=True)[:k]
        p += sum(gains) / k
        psp += sum(g * q[label] for g, label in zip(gains, top, strict=False)) / k
        psp_best += sum(best) / k
        if true:
            ndcg += sum(g * d for g, d in zip(gains, disc, strict=False)) / ideal
            r += sum(gains) / len(true)
            psn += sum(g * q[label] * d for g, label, d in zip(gains, top, disc, strict=False)) / ideal
            psn_best += sum(b * d for b, d in zip(best, disc, strict=False)) / ideal
    return {
        f"P@{k}": 100 * p / n,
        f"nDCG@{k}": 100 * ndcg / n,
        f"PSP@{k}": 100 * psp / psp_best if psp_best else 0.0,
        f"PSnDCG@{k}": 100 * psn / psn_best if psn_best else 0.0,
        f"R@{k}": 100 * r / n,
    }


@st.composite
def problems(draw):
    n_labels = draw(st.integers(1, 12))
    n_docs = draw(st.integers(1, 8))
    label_sets = st.lists(st.integers(0, n_labels - 1), max_size=n_labels, unique=True)
    rows = draw(st.lists(label_sets, min_size=n_docs, max_size=n_docs))
    truth = draw(st.lists(label_sets, min_size=n_docs, max_size=n_docs))
    q = draw(st.lists(st.floats(1.0, 10.0), min_size=n_labels, max_size=n_labels))
    return rows, truth, n_labels, q, draw(st.integers(1, 14))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_matches_the_formulas_on_random_cases(case):
    rows, truth_rows, n_labels, q, k = case
    m = compute_metrics(ranking_of(rows), truth_matrix(truth_rows, n_labels), ks=[k], inv_propensity=np.array(q))
    assert m == pytest.approx(reference_metrics(rows, truth_rows, k, q), rel=1e-9, abs=1e-9)
    assert all(0.0 <= v <= 100.0 + 1e-9 for v in m.values())


def test_matches_napkinxc():
    nxc = pytest.importorskip("napkinxc.metrics")
    rng = np.random.default_rng(7)
    n_docs, n_labels, k = 300, 40, 10
    truth_rows = [sorted(rng.choice(n_labels, rng.integers(0, 8), replace=False).tolist()) for _ in range(n_docs)]
    # rankings of varied length (some shorter than k), half of them seeded with true labels
    rows = []
    for true in truth_rows:
        ranked = list(rng.permutation(n_labels)[: rng.integers(0, 14)])
        if true and rng.random() < 0.5:
            ranked = [true[0]] + [label for label in ranked if label != true[0]]
        rows.append([int(label) for label in ranked])
    train = truth_matrix([sorted(rng.choice(n_labels, 3, replace=False).tolist()) for _ in range(500)], n_labels)
    q = inverse_propensity(train)
    np.testing.assert_allclose(q, nxc.Jain_et_al_inverse_propensity(train), rtol=1e-12)
    ks = list(range(1, k + 1))
    m = compute_metrics(ranking_of(rows), truth_matrix(truth_rows, n_labels), ks=ks, inv_propensity=q)
    expected = {
        "P": nxc.precision_at_k(truth_rows, rows, k=k),
        "nDCG": nxc.ndcg_at_k(truth_rows, rows, k=k),
        "PSP": nxc.psprecision_at_k(truth_rows, rows, q, k=k, normalize=True),
        "PSnDCG": nxc.psndcg_at_k(truth_rows, rows, q, k=k, normalize=True),
        "R": nxc.recall_at_k(truth_rows, rows, k=k),
    }
    for name, values in expected.items():
        ours = [m[f"{name}@{j}"] / 100 for j in ks]
        np.testing.assert_allclose(ours, values, rtol=1e-9, err_msg=name)
