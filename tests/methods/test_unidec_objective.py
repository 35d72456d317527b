"""UniDECObjective against UniDEC Algorithm 1 on small problems worked out by hand.

The reference losses below are written from the paper's formulas (Sec. 3.1-3.2), with plain loops in
float64 and the heads recomputed from their weights:

    PAL-N (PSL)  ℓ_i = −1/|P_i^B| Σ_{p ∈ P_i^B} log( e^{s_ip/τ} / Σ_{l ∈ L_B} e^{s_il/τ} ), mean over queries
    L_D = λ_D · q2l(S_D) + (1 − λ_D) · l2q(S_Dᵀ),   S_D = Φ_D(x)·Φ_D(z)ᵀ
    L_C = λ_C · q2l(S_C) + (1 − λ_C) · l2q(S_Cᵀ),   S_C = Φ_C(x)·Ψᵀ
    L   = λ · L_D + (1 − λ) · L_C
"""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.encoders import BagOfEmbeddings
from xdex.losses import build_loss
from xdex.methods.objective import SamplingConfig
from xdex.methods.unidec import HeadsConfig, UniDECObjective
from xdex.modules import UniDECNet
from xdex.sampling import HardNegatives
from xdex.text import Tokenizer

WORDS = ["a", "b", "c", "d", "e", "f"]
TAU_D, LAM_D = 0.1, 0.3  # DE loss: PAL-N at τ = 0.1, q2l weight 0.3
TAU_C, LAM_C = 0.5, 0.7  # classifier loss: its own τ and λ_C

# Problem 1: five queries, six labels, β = 1, η = 1.
#   q0 {0, 1}   q1 {1}   q2 {0}   q3 {2, 3}   q4 {4}
# Hard-negative shortlists: label 2 for q1 and label 3 for q4 (both positives of q3), label 5 for the others.
# Whatever positive each query samples, the pool is all six labels: 0 and 1 are the sampled positives
# of q2 and q1, 2 and 3 hard negatives of q1 and q4, 4 q4's positive, 5 a hard negative. So with β = 1,
# q0 and q3 each have 2 positives in the pool (P_i^B ⊋ P̂_i: an other query's positive for q0, an other
# query's hard negative for q3) and Avg|P_i^B| = 7/5.
QUERIES_1 = ["a b", "b", "a", "c d", "e"]
Y_1 = [[1, 1, 0, 0, 0, 0],
       [0, 1, 0, 0, 0, 0],
       [1, 0, 0, 0, 0, 0],
       [0, 0, 1, 1, 0, 0],
       [0, 0, 0, 0, 1, 0]]
SHORTLIST_1 = [[5], [2], [5], [5], [3]]

# Problem 2: q0 has four positives {0, 1, 2, 3}, q1 has {4}; β = 1, no hard negatives. The DE pool is
# one of q0's positives plus label 4; POS-CLF with β_E = 4 adds all of q0's positives for Ψ.
QUERIES_2 = ["a b c d", "e"]
Y_2 = [[1, 1, 1, 1, 0, 0],
       [0, 0, 0, 0, 1, 0]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", *WORDS]) + "\n")
    return Tokenizer.from_pretrained_dir(folder)


def label_texts(n):
    """Label l reads the word WORDS[l] (cycling when there are more labels than words)."""
    return [WORDS[j % len(WORDS)] for j in range(n)]


def make_objective(tokenizer, query_texts, y, *, beta=1, eta=0, shortlist=None, classifiers=True, sampling=None,
                   **heads):
    """Batches of all queries and no refresh, unless ``sampling`` (SamplingConfig fields) says otherwise."""
    torch.manual_seed(0)
    encoder = BagOfEmbeddings(tokenizer, 4, weighting="none", seed=1)
    y = sp.csr_matrix(np.asarray(y, dtype=np.float32))
    net = UniDECNet(encoder, 3, y.shape[1] if classifiers else None, dropout=0.5,
                    search="concat" if classifiers else "de").eval()  # dropout off
    de_loss = build_loss("symmetric", q2l={"name": "paln", "temperature": TAU_D}, q2l_weight=LAM_D)
    clf_loss = (build_loss("symmetric", q2l={"name": "paln", "temperature": TAU_C}, q2l_weight=LAM_C)
                if classifiers else None)
    cfg = SamplingConfig(**{"batch_size": y.shape[0], "beta": beta, "hard_negatives": eta, "clustered": False,
                            "first_refresh": 10**6, **(sampling or {})})
    queries, labels = encoder.tokenize(query_texts), encoder.tokenize(label_texts(y.shape[1]))
    obj = UniDECObjective(net, de_loss, queries, labels, y, cfg, HeadsConfig(dim=3, classifier=classifiers, **heads),
                          clf_loss, seed=0)
    if shortlist is not None:
        obj.negatives = HardNegatives(np.asarray(shortlist))
    obj.start_epoch(0)
    return obj


def whole_batch(obj):
    return (0, 0, np.arange(obj.y.shape[0]))


# -- references from the paper's formulas ---------------------------------------------------------------
def paln(scores, mask, tau):
    rows = []
    for s, m in zip(scores, mask, strict=False):
        if m.any():
            log_softmax = s / tau - np.log(np.exp(s / tau).sum())
            rows.append(-log_softmax[m].sum() / m.sum())
    return float(np.mean(rows))


def symmetric(scores, mask, tau, lam):
    return lam * paln(scores, mask, tau) + (1 - lam) * paln(scores.T, mask.T, tau)


def bce(scores, mask):
    """OvA BCE with logits, averaged over the pool and over the queries with a positive."""
    p = 1 / (1 + np.exp(-scores))
    entries = -np.where(mask, np.log(p), np.log(1 - p))
    return float(entries[mask.any(axis=1)].mean(axis=1).mean())


def heads_by_hand(obj, texts_q, pool):
    """S_D and S_C over ``pool`` from the weights: Φ_D = N(tanh(W1 Φ + b1)), Φ_C = W2 Φ + b2, Ψ rows."""
    net = obj.net
    with torch.no_grad():
        phi_q = net.encoder(net.encoder.tokenize(texts_q)).double().numpy()
        texts_z = label_texts(obj.y.shape[1])
        phi_z = net.encoder(net.encoder.tokenize([texts_z[j] for j in pool])).double().numpy()
        w1, b1 = (t.double().numpy() for t in (net.de_head[0].weight, net.de_head[0].bias))

        def de(phi):
            g = np.tanh(phi @ w1.T + b1)
            return g / np.linalg.norm(g, axis=1, keepdims=True)

        s_d = de(phi_q) @ de(phi_z).T
        if not net.has_classifier:
            return s_d, None
        w2, b2 = (t.double().numpy() for t in (net.clf_head[0].weight, net.clf_head[0].bias))
        psi = net.classifier.weight.double().numpy()[pool]
        return s_d, (phi_q @ w2.T + b2) @ psi.T


# -- the pool --------------------------------------------------------------------------------------------
def test_the_pool_masks_extra_positives_brought_by_other_queries(tokenizer):
    obj = make_objective(tokenizer, QUERIES_1, Y_1, beta=1, eta=1, shortlist=SHORTLIST_1)
    for i in range(5):  # every batch of the epoch, whatever the positives sampled
        batch = obj.make_batch((0, i, np.arange(5)))
        assert batch.label_ids.tolist() == [0, 1, 2, 3, 4, 5]
        assert batch.positives.astype(int).tolist() == Y_1
        assert batch.avg_positives_in_pool == pytest.approx(7 / 5)  # > β = 1


def test_loss_is_lambda_mix_of_the_de_and_classifier_psl_losses(tokenizer):
    obj = make_objective(tokenizer, QUERIES_1, Y_1, beta=1, eta=1, shortlist=SHORTLIST_1, de_weight=0.4)
    loss = obj.loss(whole_batch(obj))
    s_d, s_c = heads_by_hand(obj, QUERIES_1, list(range(6)))
    mask = np.array(Y_1, dtype=bool)
    l_d, l_c = symmetric(s_d, mask, TAU_D, LAM_D), symmetric(s_c, mask, TAU_C, LAM_C)
    assert loss.item() == pytest.approx(0.4 * l_d + 0.6 * l_c, rel=1e-5)
    stats = {**obj.epoch_stats(), **obj.loss_terms.summary()}  # what the trainer logs
    assert stats == pytest.approx({"avg_pool_size": 6.0, "avg_positives_in_pool": 1.4,
                                   "loss_de": l_d, "loss_clf": l_c}, rel=1e-5)


def test_depsl_loss_is_the_de_loss_alone(tokenizer):
    obj = make_objective(tokenizer, QUERIES_1, Y_1, beta=1, eta=1, shortlist=SHORTLIST_1, classifiers=False,
                         de_weight=0.4)
    assert obj.net.clf_head is None and obj.net.classifier is None
    loss = obj.loss(whole_batch(obj))
    s_d, _ = heads_by_hand(obj, QUERIES_1, list(range(6)))
    l_d = symmetric(s_d, np.array(Y_1, dtype=bool), TAU_D, LAM_D)
    assert loss.item() == pytest.approx(l_d, rel=1e-5)  # L = L_D: λ plays no part without classifiers
    assert set(obj.epoch_stats()) | set(obj.loss_terms.summary()) == {"avg_pool_size", "avg_positives_in_pool",
                                                                        "loss_de"}


def test_bce_weight_adds_an_ova_term_to_the_classifier_loss(tokenizer):
    obj = make_objective(tokenizer, QUERIES_1, Y_1, beta=1, eta=1, shortlist=SHORTLIST_1, de_weight=0.4, bce_weight=0.7)
    loss = obj.loss(whole_batch(obj))
    s_d, s_c = heads_by_hand(obj, QUERIES_1, list(range(6)))
    mask = np.array(Y_1, dtype=bool)
    l_d = symmetric(s_d, mask, TAU_D, LAM_D)
    l_c = symmetric(s_c, mask, TAU_C, LAM_C) + 0.7 * bce(s_c, mask)
    assert loss.item() == pytest.approx(0.4 * l_d + 0.6 * l_c, rel=1e-5)
    assert obj.loss_terms.summary()["loss_bce"] == pytest.approx(bce(s_c, mask), rel=1e-5)


def test_pos_clf_adds_extra_positives_to_the_classifier_pool_only(tokenizer):
    plain = make_objective(tokenizer, QUERIES_2, Y_2, beta=1)
    pos_clf = make_objective(tokenizer, QUERIES_2, Y_2, beta=1, de_weight=0.4, extra_positives=4)
    item = whole_batch(pos_clf)
    batch = pos_clf.make_batch(item)
    assert len(batch.label_ids) == 2 and batch.label_ids[1] == 4 and batch.label_ids[0] in (0, 1, 2, 3)
    pool, mask = pos_clf.classifier_pool(item, batch.query_ids, batch.label_ids)
    assert pool.tolist() == [0, 1, 2, 3, 4]  # β_E = 4 brings all of q0's positives
    assert mask.astype(int).tolist() == [[1, 1, 1, 1, 0], [0, 0, 0, 0, 1]]

    loss = pos_clf.loss(item)
    plain.loss(item)
    de_pool = batch.label_ids.tolist()
    s_d, _ = heads_by_hand(pos_clf, QUERIES_2, de_pool)
    _, s_c = heads_by_hand(pos_clf, QUERIES_2, [0, 1, 2, 3, 4])
    l_d = symmetric(s_d, np.array(Y_2, dtype=bool)[:, de_pool], TAU_D, LAM_D)
    l_c = symmetric(s_c, mask, TAU_C, LAM_C)
    assert loss.item() == pytest.approx(0.4 * l_d + 0.6 * l_c, rel=1e-5)
    assert pos_clf.loss_terms.summary()["loss_de"] == pytest.approx(l_d, rel=1e-5)
    assert plain.loss_terms.summary()["loss_de"] == pytest.approx(l_d, rel=1e-5)  # the DE loss is unchanged
    assert pos_clf.epoch_stats()["avg_pool_size"] == 2.0  # the statistics describe the DE pool


def test_init_classifiers_sets_psi_to_the_eval_mode_classifier_head_of_the_label_texts(tokenizer):
    obj = make_objective(tokenizer, QUERIES_1, Y_1)
    net = obj.net.train()  # dropout 0.5 would change Ψ if it were on
    obj.init_classifiers()
    assert net.training
    with torch.no_grad():
        phi = net.encoder(net.encoder.tokenize(label_texts(6)))
        expected = phi @ net.clf_head[0].weight.T + net.clf_head[0].bias
    torch.testing.assert_close(net.classifier.weight.detach(), expected)

    random = make_objective(tokenizer, QUERIES_1, Y_1, classifier_init="random")
    before = random.net.classifier.weight.detach().clone()
    random.init_classifiers()
    assert torch.equal(random.net.classifier.weight.detach(), before)


def test_gradients_reach_the_pool_rows_of_psi_and_the_encoder_and_heads(tokenizer):
    obj = make_objective(tokenizer, QUERIES_2, Y_2, beta=1)
    item = whole_batch(obj)
    pool = obj.make_batch(item).label_ids.tolist()
    obj.loss(item).backward()
    net = obj.net
    grad = net.classifier.weight.grad
    assert grad.is_sparse
    grad = grad.coalesce()
    assert sorted(grad.indices()[0].tolist()) == pool  # two of the six rows: only the pool's
    assert grad.values().abs().sum() > 0
    for p in (net.encoder.embedding.weight, net.de_head[0].weight, net.clf_head[0].weight, net.clf_head[0].bias):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_a_refresh_epoch_mines_hard_negatives_in_the_de_space_and_pools_stay_bounded(tokenizer):
    rng = np.random.default_rng(0)
    n_q, n_l, batch, beta, eta = 64, 200, 16, 2, 2
    y = np.zeros((n_q, n_l), dtype=bool)
    for i in range(n_q):
        y[i, rng.choice(n_l, size=rng.integers(1, 5), replace=False)] = True
    texts = [" ".join(rng.choice(WORDS, size=3)) for _ in range(n_q)]
    obj = make_objective(tokenizer, texts, y, beta=beta, eta=eta, sampling={
        "batch_size": batch, "clustered": True, "cluster_size": 4, "first_refresh": 0, "refresh_every": 3})
    shortlist = obj.negatives.shortlist
    assert shortlist.shape == (n_q, eta * 3)  # |H_i| = η·τ
    assert not any(y[i, shortlist[i][shortlist[i] >= 0]].any() for i in range(n_q))  # H_i ∩ P_i = ∅
    pools = []
    for item in obj.batches(0):
        obj.loss(item)
        pools.append(len(obj.make_batch(item).label_ids))
    assert len(pools) == n_q // batch and max(pools) <= batch * (beta + eta)
    stats = {**obj.epoch_stats(), **obj.loss_terms.summary()}  # what the trainer logs
    assert set(stats) == {"avg_pool_size", "avg_positives_in_pool", "loss_de", "loss_clf"}
    assert stats["avg_pool_size"] == pytest.approx(np.mean(pools))
    assert 1 <= stats["avg_positives_in_pool"] <= 4 and stats["loss_de"] > 0 and stats["loss_clf"] > 0


def test_inconsistent_heads_settings_are_refused(tokenizer):
    with pytest.raises(ValueError, match="heads.de_weight must be in"):
        make_objective(tokenizer, QUERIES_1, Y_1, de_weight=1.5)
    obj = make_objective(tokenizer, QUERIES_1, Y_1, classifiers=False)
    with pytest.raises(ValueError, match="does not match the network"):
        UniDECObjective(obj.net, obj.loss_fn, obj.queries, obj.labels, obj.y, obj.cfg, HeadsConfig(), obj.loss_fn)
    obj = make_objective(tokenizer, QUERIES_1, Y_1)
    with pytest.raises(ValueError, match="classifier loss is needed"):
        UniDECObjective(obj.net, obj.loss_fn, obj.queries, obj.labels, obj.y, obj.cfg, HeadsConfig(), None)
    with pytest.raises(ValueError, match="must be >= 0"):
        make_objective(tokenizer, QUERIES_1, Y_1, extra_positives=-1)


# -- property: the pool never scores a positive as a negative ------------------------------------------
@st.composite
def problems(draw):
    n_q, n_l = draw(st.integers(1, 8)), draw(st.integers(1, 10))
    y = np.array(draw(st.lists(st.lists(st.booleans(), min_size=n_l, max_size=n_l), min_size=n_q, max_size=n_q)))
    return y, draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_pool_masks_are_exact_and_bounded(tokenizer, problem):
    y, beta, eta, beta_e, seed = problem
    n_q, n_l = y.shape
    obj = make_objective(tokenizer, ["a b"] * n_q, y, beta=beta, eta=eta, extra_positives=beta_e)
    rng = np.random.default_rng(seed)
    if eta:
        search = np.argsort(rng.random((n_q, n_l)), axis=1)
        obj.negatives = HardNegatives.from_search(search, obj.y, int(rng.integers(1, n_l + 1)))
    queries = rng.permutation(n_q)
    item = (0, int(rng.integers(0, 100)), queries)
    batch = obj.make_batch(item)
    pool, mask = batch.label_ids, batch.positives
    assert np.array_equal(mask, y[queries][:, pool])  # every in-pool positive masked, nothing else
    assert np.array_equal(pool, np.unique(pool)) and len(pool) <= n_q * (beta + eta)
    assert np.all(mask.sum(axis=1) >= np.minimum(beta, y[queries].sum(axis=1)))  # the sampled ones at least
    if beta_e:
        clf_pool, clf_mask = obj.classifier_pool(item, batch.query_ids, pool)
        assert np.array_equal(clf_mask, y[queries][:, clf_pool])
        extra = np.setdiff1d(clf_pool, pool)
        assert set(pool) <= set(clf_pool) and len(extra) <= n_q * beta_e
        assert y[queries][:, extra].any(axis=0).all()  # only positives of the batch's queries join
