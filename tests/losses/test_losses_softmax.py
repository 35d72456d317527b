"""SoftmaxCE (DEXML Eq. 3), DecoupledSoftmax (Eq. 5) and UniDEC's PAL / PAL-N against their formulas."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.losses import PAL, PALN, DecoupledSoftmax, InfoNCE, SoftmaxCE, SupCon

# 2 queries x 3 labels; query 0 has two positives, query 1 one.
S = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
M = torch.tensor([[True, True, False], [False, False, True]])

E = math.e
# Row 0: log Σ_j e^{s_0j} = log(e + 1 + 1/e) = 1.40760596444438
#        ℓ_0 = Σ_{p in {0,1}} (1.40760596444438 − s_0p) = 2·1.40760596444438 − (1 + 0) = 1.81521192888876
# Row 1: log(2·e^0.5 + 1) = 1.45802008794703;  ℓ_1 = 1.45802008794703 − s_12 (= 0)
SOFTMAX_ROWS = (1.81521192888876, 1.45802008794703)


def test_softmax_ce_matches_eq3_by_hand():
    assert math.isclose(2 * math.log(E + 1 + 1 / E) - 1, SOFTMAX_ROWS[0], rel_tol=1e-12)
    loss = SoftmaxCE(temperature=1.0)(S, M)
    assert loss.item() == pytest.approx(sum(SOFTMAX_ROWS) / 2, rel=1e-12)  # 1.63661600841790


def test_decoupled_softmax_matches_eq5_by_hand():
    # Row 0, positive 0 (s=1): −log(e / (e + e^-1)) = log(1 + e^-2) = 0.12692801104297
    #        positive 1 (s=0): −log(1 / (1 + e^-1)) = log(1 + e^-1) = 0.31326168751822
    # Row 1 has a single positive, so its term equals the softmax one: 1.45802008794703
    row0 = math.log(1 + E**-2) + math.log(1 + E**-1)
    assert row0 == pytest.approx(0.12692801104297 + 0.31326168751822, rel=1e-12)
    loss = DecoupledSoftmax(temperature=1.0)(S, M)
    assert loss.item() == pytest.approx((row0 + SOFTMAX_ROWS[1]) / 2, rel=1e-12)  # 0.94910489325411


def test_paln_divides_each_row_by_its_positive_count_and_pal_does_not():
    paln = PALN(temperature=1.0)(S, M).item()
    assert paln == pytest.approx((SOFTMAX_ROWS[0] / 2 + SOFTMAX_ROWS[1] / 1) / 2, rel=1e-12)  # 1.18281302619571
    pal = PAL(temperature=1.0)(S, M).item()
    assert pal == pytest.approx(sum(SOFTMAX_ROWS) / 2, rel=1e-12)


def test_aliases_are_the_same_losses():
    assert InfoNCE is SoftmaxCE
    assert SupCon is PALN


def test_temperature_divides_the_scores():
    # s / τ with τ = 0.5 is the same as doubling the scores at τ = 1.
    for cls in (SoftmaxCE, DecoupledSoftmax, PALN):
        assert cls(temperature=0.5)(S, M).item() == pytest.approx(cls(temperature=1.0)(2 * S, M).item(), rel=1e-12)


# Gradients with respect to the scores against the closed forms of DEXML Appendix C.2
# (there ∂/∂z_l = (∂/∂s_l) x_q; here the scores themselves are the inputs).
G_SCORES = np.array([[0.3, -0.2, 1.1, 0.4, -0.7], [0.9, 0.1, -0.3, 0.2, 0.5], [-0.4, 0.8, 0.0, 0.6, -1.2]])
G_MASK = np.array(
    [[True, False, True, False, False], [False, True, False, False, False], [True, True, False, True, False]]
)


def _grad(loss, scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    s = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    loss(s, torch.tensor(mask)).backward()
    return s.grad.numpy()


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_softmax_ce_gradient_matches_appendix_c2(tau):
    # ∂ℓ_i/∂x_il = |P_i| σ_il − 1[l in P_i] with σ_il = e^{x_il} / Σ_k e^{x_ik}; x = s/τ adds 1/τ,
    # and the batch mean over the 3 rows adds 1/3.
    x = G_SCORES / tau
    sigma = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    n_pos = G_MASK.sum(axis=1, keepdims=True)
    expected = (n_pos * sigma - G_MASK) / tau / 3
    np.testing.assert_allclose(_grad(SoftmaxCE(temperature=tau), G_SCORES, G_MASK), expected, rtol=1e-10, atol=1e-12)


def test_softmax_ce_over_logits_far_below_their_row_maximum_matches_eq3():
    # Unnormalised classifier scores at τ = 0.05 put most logits hundreds below their row's largest, where e^{x}
    # underflows float32: the loss and its gradient are still Eq. 3's (float64 reference, sums in order).
    rng = np.random.default_rng(0)
    scores = rng.uniform(-20.0, 20.0, size=(8, 300)).astype(np.float32)
    mask = rng.random((8, 300)) < 0.02
    mask[:, 0] = True
    x = scores.astype(np.float64) / 0.05
    log_denominator = x.max(axis=1) + np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1))
    n_pos = mask.sum(axis=1)
    rows = (n_pos * log_denominator - np.where(mask, x, 0.0).sum(axis=1)) / n_pos
    sigma = np.exp(x - log_denominator[:, None])
    expected_grad = (sigma - mask / n_pos[:, None]) / 0.05 / 8
    s = torch.tensor(scores, requires_grad=True)
    loss = PALN(temperature=0.05)(s, torch.tensor(mask))
    loss.backward()
    assert loss.item() == pytest.approx(rows.mean(), rel=1e-5)
    np.testing.assert_allclose(s.grad.numpy(), expected_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_decoupled_softmax_gradient_matches_appendix_c2(tau):
    # Positives l: −(1 − σ_il) with σ_il = e^{x_il} / (e^{x_il} + Σ_{k∉P_i} e^{x_ik});
    # negatives l: Σ_{j in P_i} e^{x_il} / (e^{x_ij} + Σ_{k∉P_i} e^{x_ik}).
    x = G_SCORES / tau
    expected = np.zeros_like(x)
    for i in range(x.shape[0]):
        neg_sum = np.exp(x[i][~G_MASK[i]]).sum()
        for c in range(x.shape[1]):
            if G_MASK[i, c]:
                expected[i, c] = -(1 - np.exp(x[i, c]) / (np.exp(x[i, c]) + neg_sum))
            else:
                expected[i, c] = sum(np.exp(x[i, c]) / (np.exp(x[i, j]) + neg_sum) for j in np.flatnonzero(G_MASK[i]))
    expected = expected / tau / 3
    actual = _grad(DecoupledSoftmax(temperature=tau), G_SCORES, G_MASK)
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)


def test_decoupled_softmax_does_not_penalise_a_confident_positive():
    # DEXML Sec. 4.1: raising one positive far above everything drives its own term to 0 under
    # DecoupledSoftmax, while SoftmaxCE then pushes the other positive (gradient sign on it).
    s = torch.tensor([[20.0, 0.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    m = torch.tensor([[True, True, False, False]])
    DecoupledSoftmax(temperature=1.0)(s, m).backward()
    assert abs(s.grad[0, 0].item()) < 1e-8
    s.grad = None
    SoftmaxCE(temperature=1.0)(s, m).backward()
    assert s.grad[0, 0].item() > 0.99  # |P|σ − 1 ≈ 2 − 1: the confident positive is pushed down


@st.composite
def pools(draw):
    b = draw(st.integers(1, 4))
    p = draw(st.integers(2, 6))
    values = draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=b * p, max_size=b * p))
    flags = draw(st.lists(st.booleans(), min_size=b * p, max_size=b * p))
    return torch.tensor(values, dtype=torch.float64).view(b, p), torch.tensor(flags).view(b, p)


@settings(max_examples=40, deadline=None)
@given(pools())
def test_pal_and_paln_rows_differ_exactly_by_the_positive_count(pool):
    scores, mask = pool
    pal_rows = PAL(temperature=1.0).row_losses(scores, mask)
    paln_rows = PALN(temperature=1.0).row_losses(scores, mask)
    has = mask.any(dim=1)
    torch.testing.assert_close(paln_rows[has] * mask.sum(dim=1)[has], pal_rows[has], rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(pools())
def test_decoupled_never_exceeds_softmax_and_matches_it_with_one_positive(pool):
    scores, mask = pool
    decoupled = DecoupledSoftmax(temperature=1.0)(scores, mask)
    softmax = SoftmaxCE(temperature=1.0)(scores, mask)
    assert decoupled.item() <= softmax.item() + 1e-12
    single = torch.zeros_like(mask)
    single[:, 0] = True
    assert DecoupledSoftmax(temperature=1.0)(scores, single).item() == pytest.approx(
        SoftmaxCE(temperature=1.0)(scores, single).item(), rel=1e-12
    )
