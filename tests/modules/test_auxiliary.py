"""AuxiliaryVectors: Eq. 5 by hand, sparse gradients, the reassign mean rule, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xdex.modules.auxiliary import AuxiliaryVectors


def test_zero_start_gives_the_normalised_label_embeddings():
    aux = AuxiliaryVectors(np.array([0, 1, 1, 2]), dim=3)
    assert aux.num_clusters == 3 and aux.num_labels == 4 and aux.dim == 3
    assert aux.assignment.dtype == torch.int64
    z = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]])
    out = aux(torch.tensor([2, 0]), z)
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]]))


def test_forward_adds_the_cluster_vector_then_normalises():
    aux = AuxiliaryVectors(torch.tensor([1, 0, 1]), dim=2)
    with torch.no_grad():
        aux.vectors.weight.copy_(torch.tensor([[0.0, 5.0], [2.0, -1.0]]))
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # label 2 -> cluster 1: (0, 1) + (2, -1) = (2, 0) -> (1, 0); label 1 -> cluster 0: (1, 5) / sqrt 26
    out = aux(torch.tensor([2, 1]), z[[2, 1]])
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0], [1 / 26**0.5, 5 / 26**0.5]]))
    torch.testing.assert_close(aux.augment_all(z), torch.stack([
        torch.tensor([3.0, -1.0]) / 10**0.5, torch.tensor([1.0, 5.0]) / 26**0.5, torch.tensor([1.0, 0.0])]))


def test_gradient_reaches_exactly_the_rows_of_the_clusters_in_the_batch():
    aux = AuxiliaryVectors(np.array([0, 3, 3, 1, 2, 4]), dim=4)
    z = F.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1).requires_grad_()
    (aux(torch.tensor([1, 2, 4]), z) * torch.tensor([1.0, -2.0, 0.5, 3.0])).sum().backward()
    grad = aux.vectors.weight.grad
    assert grad.is_sparse
    grad = grad.coalesce()
    assert sorted(grad.indices()[0].tolist()) == [2, 3]  # labels 1, 2 -> cluster 3; label 4 -> cluster 2
    assert z.grad is not None and torch.count_nonzero(z.grad) > 0
    # at a = 0 the gradient w.r.t. a_{C(l)} equals the gradient w.r.t. z_l, summed over the cluster's labels
    dense = grad.to_dense()
    torch.testing.assert_close(dense[3], z.grad[0] + z.grad[1])
    torch.testing.assert_close(dense[2], z.grad[2])


def test_dense_table_option():
    aux = AuxiliaryVectors(np.array([0, 1]), dim=2, sparse=False)
    aux(torch.tensor([1]), torch.ones(1, 2)).sum().backward()
    assert not aux.vectors.weight.grad.is_sparse and aux.vectors.weight.grad[0].abs().sum() == 0


def test_reassign_starts_each_new_cluster_at_the_mean_of_its_labels_old_vectors():
    aux = AuxiliaryVectors(np.array([0, 0, 1, 2]), dim=2)
    with torch.no_grad():
        aux.vectors.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]]))
    parameter = aux.vectors.weight
    aux.reassign(np.array([1, 0, 0, 3]))
    # new 0 <- labels 1 (old a_0 = (1, 0)) and 2 (old a_1 = (0, 2)): (0.5, 1); new 1 <- label 0: (1, 0);
    # new 2 <- no label: 0; new 3 <- label 3 (old a_2 = (4, 4))
    expected = torch.tensor([[0.5, 1.0], [1.0, 0.0], [0.0, 0.0], [4.0, 4.0]])
    torch.testing.assert_close(aux.vectors.weight.detach(), expected)
    assert aux.num_clusters == 4 and aux.assignment.tolist() == [1, 0, 0, 3]
    assert aux.vectors.weight is parameter and aux.vectors.sparse  # optimisers keep the same parameter
    aux(torch.tensor([3]), torch.zeros(1, 2)).sum().backward()
    assert aux.vectors.weight.grad.shape == (4, 2)


def test_reassign_to_fewer_clusters_keeps_the_table_size():
    aux = AuxiliaryVectors(np.array([0, 1, 2, 3]), dim=1)
    with torch.no_grad():
        aux.vectors.weight.copy_(torch.tensor([[1.0], [2.0], [3.0], [6.0]]))
    aux.reassign(torch.tensor([0, 0, 0, 0]))
    # (1 + 2 + 3 + 6) / 4 = 3 for cluster 0; ids no label takes keep zero vectors, K stays 4
    torch.testing.assert_close(aux.vectors.weight.detach(), torch.tensor([[3.0], [0.0], [0.0], [0.0]]))


def test_state_dict_round_trip_keeps_the_assignment_and_a_changed_k():
    aux = AuxiliaryVectors(np.array([0, 1, 1, 0, 2]), dim=3)
    with torch.no_grad():
        aux.vectors.weight.copy_(torch.arange(9.0).view(3, 3))
    aux.reassign(np.array([0, 1, 2, 3, 3]))
    state = aux.state_dict()
    assert set(state) == {"assignment", "vectors.weight"}
    restored = AuxiliaryVectors(np.zeros(5, dtype=np.int64), dim=3)
    restored.load_state_dict(state)
    assert restored.assignment.tolist() == [0, 1, 2, 3, 3] and restored.num_clusters == 4
    torch.testing.assert_close(restored.vectors.weight, aux.vectors.weight)
    assert "num_labels=5, num_clusters=4, dim=3" in repr(restored)


def test_augment_all_in_chunks_matches_forward(monkeypatch):
    monkeypatch.setattr("xdex.modules.auxiliary._CHUNK_ELEMENTS", 8)  # 2 rows of dim 4 per chunk
    gen = torch.Generator().manual_seed(1)
    aux = AuxiliaryVectors(torch.randint(0, 3, (7,), generator=gen), dim=4)
    with torch.no_grad():
        aux.vectors.weight.normal_(generator=gen)
    z = torch.randn(7, 4, generator=gen)
    out = aux.augment_all(z)
    assert not out.requires_grad
    torch.testing.assert_close(out, aux(torch.arange(7), z).detach())


@pytest.mark.parametrize(
    ("assignment", "dim", "message"),
    [
        (np.array([0, 1]), 0, "dimension must be positive"),
        (np.array([], dtype=np.int64), 2, "non-empty 1-D array"),
        (np.array([[0, 1]]), 2, "non-empty 1-D array"),
        (np.array([0.0, 1.0]), 2, "integer cluster ids"),
        (np.array([0, -1]), 2, "non-negative, got -1"),
    ],
)
def test_bad_construction(assignment, dim, message):
    with pytest.raises(ValueError, match=message):
        AuxiliaryVectors(assignment, dim)


def test_bad_calls():
    aux = AuxiliaryVectors(np.array([0, 1, 1]), dim=2)
    with pytest.raises(ValueError, match=r"embeddings \[P, 2\], got \(2,\) and \(2, 3\)"):
        aux(torch.tensor([0, 1]), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"all 3 labels \[L, 2\], got \(2, 2\)"):
        aux.augment_all(torch.ones(2, 2))
    with pytest.raises(ValueError, match="covers 2 labels, expected 3"):
        aux.reassign(np.array([0, 1]))
