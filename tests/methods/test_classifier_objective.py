import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.losses import Triplet, build_loss
from xdex.methods.classifiers import ClassifierObjective, choose_fusion, hard_negative_shortlist
from xdex.train.optim import OptimConfig, build_optimizers


def _csr(rows: list[list[int]], n_labels: int) -> sp.csr_matrix:
    r = [i for i, row in enumerate(rows) for _ in row]
    c = [j for row in rows for j in row]
    return sp.csr_matrix((np.ones(len(c), np.float32), (r, c)), shape=(len(rows), n_labels))


def _random_case(seed: int, n: int = 40, n_labels: int = 25, dim: int = 6):
    rng = np.random.default_rng(seed)
    y = sp.csr_matrix((rng.random((n, n_labels)) < 0.12).astype(np.float32))
    x = rng.standard_normal((n, dim)).astype(np.float32)
    z = rng.standard_normal((n_labels, dim)).astype(np.float32)
    return x, z, y


# -- Module II training -----------------------------------------------------------------------------
def test_classifiers_start_exactly_at_init_and_are_a_sparse_table():
    x, z, y = _random_case(0)
    init = torch.from_numpy(z)
    obj = ClassifierObjective(torch.from_numpy(x), init, y, Triplet(), batch_size=8)
    assert torch.equal(obj.classifiers.weight, init)
    assert obj.classifiers.sparse
    with torch.no_grad():
        obj.classifiers.weight.add_(1.0)
    assert torch.equal(init, torch.from_numpy(z))  # the table is a copy, not a view of init
    assert torch.equal(obj.weights(), init + 1.0)


def test_one_triplet_step_follows_the_subgradient_of_eq6_on_pool_rows_only():
    # documents x0 = e0, x1 = e1; positives y0 = {0}, y1 = {1}; label 2 never enters a pool
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    w = torch.tensor([[0.5, 0.0], [0.8, 0.1], [0.3, -0.2]])
    y = _csr([[0], [1]], 3)
    obj = ClassifierObjective(x, w, y, Triplet(margin=0.3, num_negatives=1), batch_size=2)
    obj.start_epoch(0)
    (item,) = obj.batches(0)
    loss = obj.loss(item)
    # s = [[0.5, 0.8], [0.0, 0.1]]; hinges [0.8 - 0.5 + 0.3]_+ = 0.6 and [0.0 - 0.1 + 0.3]_+ = 0.2; mean 0.4
    assert loss.item() == pytest.approx(0.4)
    loss.backward()
    grad = obj.classifiers.weight.grad
    assert grad.is_sparse
    # d/dw_m = +x_i/2 and d/dw_l = -x_i/2 per active hinge: w0 gets (-x0 + x1)/2, w1 gets (x0 - x1)/2
    expected = torch.tensor([[-0.5, 0.5], [0.5, -0.5], [0.0, 0.0]])
    assert torch.allclose(grad.to_dense(), expected)
    assert sorted(grad.coalesce().indices()[0].tolist()) == [0, 1]

    (opt,) = build_optimizers(obj.model, OptimConfig(lr_sparse=0.01))
    assert isinstance(opt, torch.optim.SparseAdam)
    opt.step()
    moved = obj.classifiers.weight.detach() - w
    # Adam's first step is lr · sign(gradient), against the gradient; label 2 stays put
    assert torch.allclose(moved, -0.01 * torch.sign(expected), atol=1e-6)
    assert torch.equal(obj.classifiers.weight[2].detach(), w[2])
    assert obj.epoch_stats() == {"avg_pool_size": 2.0, "avg_positives_in_pool": 1.0}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), beta=st.integers(1, 3), eta=st.integers(1, 4))
def test_pools_never_count_a_positive_as_a_negative(seed, beta, eta):
    x, z, y = _random_case(seed)
    shortlist = hard_negative_shortlist(x, z, y, size=6)
    dense = y.toarray() > 0
    assert not np.any(np.take_along_axis(dense, np.maximum(shortlist, 0), axis=1) & (shortlist >= 0))
    obj = ClassifierObjective(torch.from_numpy(x), torch.from_numpy(z), y, Triplet(), batch_size=8, beta=beta,
                              hard_negatives=eta, shortlist=shortlist, seed=seed)
    for item in obj.batches(0):
        batch = obj.make_batch(item)
        assert np.array_equal(batch.positives, dense[batch.query_ids][:, batch.label_ids])


def test_batches_are_deterministic_per_seed_and_epoch():
    x, z, y = _random_case(1)
    shortlist = hard_negative_shortlist(x, z, y, size=4)

    def pools(seed: int, epoch: int) -> list[list[int]]:
        obj = ClassifierObjective(torch.from_numpy(x), torch.from_numpy(z), y, Triplet(), batch_size=8,
                                  hard_negatives=2, shortlist=shortlist, seed=seed)
        return [obj.make_batch(item).label_ids.tolist() for item in obj.batches(epoch)]

    assert pools(3, 0) == pools(3, 0)
    assert pools(3, 0) != pools(3, 1)
    assert pools(3, 0) != pools(4, 0)


def test_loss_is_finite_with_other_losses_and_state_is_empty():
    x, z, y = _random_case(2)
    obj = ClassifierObjective(torch.from_numpy(x), torch.from_numpy(z), y, build_loss("softmax"), batch_size=16)
    assert obj.steps_per_epoch() == 3
    loss = obj.loss(obj.batches(0)[0])
    assert torch.isfinite(loss)
    assert obj.state_dict() == {}
    obj.load_state_dict({})
    with pytest.raises(ValueError, match="no state"):
        obj.load_state_dict({"shortlist": None})


def test_bad_inputs_are_rejected():
    x, z, y = _random_case(3)
    xt, zt = torch.from_numpy(x), torch.from_numpy(z)
    with pytest.raises(ValueError, match="label matrix"):
        ClassifierObjective(xt[:5], zt, y, Triplet())
    with pytest.raises(ValueError, match=r"\[N, D\] and \[L, D\]"):
        ClassifierObjective(xt, zt[:, :3], y, Triplet())
    with pytest.raises(ValueError, match="needs a shortlist"):
        ClassifierObjective(xt, zt, y, Triplet(), hard_negatives=2)
    with pytest.raises(ValueError, match="outside"):
        ClassifierObjective(xt, zt, y, Triplet(), hard_negatives=2, shortlist=np.full((40, 3), 25))


# -- hard-negative shortlists -----------------------------------------------------------------------
def test_shortlist_is_the_best_non_positive_labels_in_order():
    docs = np.array([[1.0, 0.0], [0.0, 1.0]])
    labels = np.array([[0.9, 0.1], [0.5, 0.5], [0.1, 0.9], [0.7, 0.0]])
    # doc 0 scores labels 0.9, 0.5, 0.1, 0.7; doc 1 scores 0.1, 0.5, 0.9, 0.0
    y = _csr([[0], [2, 1]], 4)
    shortlist = hard_negative_shortlist(docs, labels, y, size=2)
    assert shortlist.tolist() == [[3, 1], [0, 3]]
    assert hard_negative_shortlist(docs, labels, y, size=3).tolist() == [[3, 1, 2], [0, 3, -1]]


# -- score fusion -----------------------------------------------------------------------------------
def test_choose_fusion_picks_alpha_one_when_only_classifiers_rank_right():
    # one document x = e0, positive label 0; w0 = e0, z0 = e1, w1 = 0.95 e0, z1 = e0
    # fused scores: label 0 → α, label 1 → 0.95 α + (1 - α) = 1 - 0.05 α; label 0 wins iff α > 1/1.05
    x = np.array([[1.0, 0.0]])
    w = np.array([[1.0, 0.0], [0.95, 0.0]])
    z = np.array([[0.0, 1.0], [1.0, 0.0]])
    y = _csr([[0]], 2)
    best, scores = choose_fusion(x, z, w, y, k=1)
    assert best == 1.0
    assert scores == {a / 10: (100.0 if a == 10 else 0.0) for a in range(11)}


def test_choose_fusion_picks_alpha_zero_when_only_label_embeddings_rank_right():
    # w0 = e1, z0 = e0, w1 = e0, z1 = (0.95, √0.0975): label 0 → 1 - α, label 1 → α + 0.95 (1 - α);
    # label 0 wins iff α < 0.05 / 1.05
    x = np.array([[1.0, 0.0]])
    w = np.array([[0.0, 1.0], [1.0, 0.0]])
    z = np.array([[1.0, 0.0], [0.95, np.sqrt(1 - 0.95**2)]])
    best, scores = choose_fusion(x, z, w, _csr([[0]], 2), k=1)
    assert best == 0.0
    assert scores[0.0] == 100.0 and all(v == 0.0 for a, v in scores.items() if a > 0)


def test_choose_fusion_removes_filter_pairs_and_breaks_ties_to_the_smallest_alpha():
    x = np.array([[1.0, 0.0]])
    w = np.array([[1.0, 0.0], [0.95, 0.0]])
    z = np.array([[0.0, 1.0], [1.0, 0.0]])
    y = _csr([[0]], 2)
    pairs = _csr([[1]], 2)  # label 1 is filtered: label 0 is first for every α
    best, scores = choose_fusion(x, z, w, y, pairs, grid=(1.0, 0.5, 0.2), k=1)
    assert scores == {0.2: 100.0, 0.5: 100.0, 1.0: 100.0}
    assert best == 0.2


def test_choose_fusion_with_ties_on_a_three_label_cycle():
    # x_i = e_i with positive i; w_l = e_l, z_l = e_{l-1}: doc i scores label i with α, label i+1 with 1 - α.
    # α > 0.5: all right; α = 0.5: ties go to the lower id, so docs 0 and 1 are right, doc 2 (label 0) wrong
    eye = np.eye(3)
    z = np.roll(eye, 1, axis=0)  # z_0 = e_2, z_1 = e_0, z_2 = e_1
    best, scores = choose_fusion(eye, z, eye, _csr([[0], [1], [2]], 3), grid=(0.4, 0.5, 0.6, 0.9), k=1)
    assert scores[0.4] == 0.0 and scores[0.5] == pytest.approx(200 / 3) and scores[0.6] == scores[0.9] == 100.0
    assert best == 0.6


def test_choose_fusion_rejects_bad_settings():
    x, w, z, y = np.eye(2), np.eye(2), np.eye(2), _csr([[0], [1]], 2)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        choose_fusion(x, z, w, y, grid=(0.0, 1.5))
    with pytest.raises(ValueError, match="unknown fusion metric 'P@9'"):
        choose_fusion(x, z, w, y, metric="P@9", k=2)
    with pytest.raises(ValueError, match="must be"):
        choose_fusion(x, z, w[:, :1], y)
