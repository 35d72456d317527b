"""The smooth top-k operator and the SoftTop-k loss (DEXML Eq. 6, 7, Appendix B.7)."""

import math

import pytest
import torch

from xdex.losses import SoftTopK, log_soft_top_k, soft_top_k_threshold


@pytest.mark.parametrize(
    ("shape", "k", "alpha", "spread"),
    [((3, 7), 2, 2.0, 1.0), ((2, 5000), 5, 2.0, 1.0), ((4, 50), 49, 1.0, 10.0), ((2, 20), 0.3, 5.0, 0.1)],
)
def test_threshold_makes_the_memberships_sum_to_k(shape, k, alpha, spread):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * spread
    t = soft_top_k_threshold(x, k, alpha)
    sums = torch.sigmoid(alpha * (x + t)).sum(dim=1)
    torch.testing.assert_close(sums, torch.full_like(sums, float(k)), rtol=1e-10, atol=1e-10)


def test_threshold_in_float32_is_accurate_to_its_precision():
    x = torch.randn(2, 1000, generator=torch.Generator().manual_seed(1))
    t = soft_top_k_threshold(x, 5, 2.0)
    sums = torch.sigmoid(2.0 * (x + t)).sum(dim=1)
    torch.testing.assert_close(sums, torch.full_like(sums, 5.0), rtol=1e-4, atol=1e-4)


def test_memberships_by_hand():
    # Row [1, -1] with k = 1: by symmetry t = 0, z = (σ(2), σ(-2)) = (0.88079707797788, 0.11920292202212).
    # Row [0, 0] with k = 1: t = 0, z = (0.5, 0.5).
    x = torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
    t = soft_top_k_threshold(x, 1, 2.0)
    torch.testing.assert_close(t, torch.zeros(2, 1, dtype=torch.float64), atol=1e-14, rtol=0)
    z = log_soft_top_k(x, 1, alpha=2.0).exp()
    expected = torch.tensor([[0.88079707797788, 0.11920292202212], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(z, expected, rtol=1e-12, atol=1e-12)


def test_loss_matches_eq6_by_hand():
    # ℓ_i = −(1/P) Σ_{j in P_i} log z_ij with P = 2:
    # row 0, positive 0: −½ log σ(2) = ½ log(1 + e^-2) = 0.06346400552149
    # row 1, positive 0: −½ log 0.5 = 0.34657359027997
    x = torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
    m = torch.tensor([[True, False], [True, False]])
    assert 0.5 * math.log(1 + math.exp(-2)) == pytest.approx(0.06346400552149, rel=1e-12)
    loss = SoftTopK(k=1, alpha=2.0, temperature=1.0)(x, m)
    assert loss.item() == pytest.approx((0.06346400552149 + 0.34657359027997) / 2, rel=1e-12)
    # normalize=True divides by |P_i| = 1 instead of P = 2: twice the value.
    normalized = SoftTopK(k=1, alpha=2.0, temperature=1.0, normalize=True)(x, m)
    assert normalized.item() == pytest.approx(0.06346400552149 + 0.34657359027997, rel=1e-12)


def test_memberships_jacobian_matches_eq7_by_hand():
    # For x = [1, -1], k = 1, α = 2: z = (σ(2), σ(-2)) and σ'_j = α z_j (1 − z_j) = 0.20998717080701 for both.
    # Eq. 7: ∂z_l/∂x_i = σ'_l (1[i=l] − σ'_i / Σ_j σ'_j) = 0.20998717080701 · (1[i=l] − ½).
    x = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda v: log_soft_top_k(v, 1, alpha=2.0).exp(), x)[0, :, 0, :]
    half = 0.20998717080701 / 2
    expected = torch.tensor([[half, -half], [-half, half]], dtype=torch.float64)
    torch.testing.assert_close(jac, expected, rtol=1e-10, atol=1e-12)


def test_operator_backward_matches_finite_differences():
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: log_soft_top_k(v, 2, alpha=1.5), (x,), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda v: log_soft_top_k(v, 4.5, alpha=3.0), (x,), eps=1e-6, atol=1e-7)


def test_loss_backward_matches_finite_differences():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    m = torch.rand(4, 6, generator=gen) < 0.4
    m[0] = False  # a row without positives is ignored
    m[1, :2] = True  # several positives in a row
    loss = SoftTopK(k=2, alpha=2.0, temperature=0.5)
    assert torch.autograd.gradcheck(lambda v: loss(v, m), (x,), eps=1e-6, atol=1e-7)


def test_steep_sigmoid_approaches_the_hard_top_k():
    x = torch.tensor([[0.9, 0.1, 0.5, 0.7, 0.3]], dtype=torch.float64)
    z = log_soft_top_k(x, 2, alpha=200.0).exp()
    torch.testing.assert_close(z, torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0]], dtype=torch.float64), atol=1e-6, rtol=0)


def test_loss_falls_when_positives_enter_the_top_k():
    m = torch.tensor([[True, False, False, False, False]])
    outside = SoftTopK(k=2, temperature=0.05)(torch.tensor([[0.1, 0.9, 0.8, 0.5, 0.3]]), m)
    inside = SoftTopK(k=2, temperature=0.05)(torch.tensor([[0.85, 0.9, 0.8, 0.5, 0.3]]), m)
    assert inside.item() < outside.item()


@pytest.mark.parametrize("k", [0, 5, 6, -1])
def test_k_outside_the_pool_is_an_error(k):
    with pytest.raises(ValueError, match="0 < k < pool size"):
        log_soft_top_k(torch.zeros(2, 5), k)


def test_bad_parameters_are_errors():
    with pytest.raises(ValueError, match="alpha"):
        SoftTopK(alpha=0.0)
    with pytest.raises(ValueError, match="k must be"):
        SoftTopK(k=0)
    with pytest.raises(ValueError, match="n_iter"):
        SoftTopK(n_iter=0)
