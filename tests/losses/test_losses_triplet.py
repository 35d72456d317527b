"""NGAME's triplet loss over the hardest in-pool negatives, against hand computations."""

import math

import pytest
import torch

from xdex.losses import Triplet

# Query 0: positives 0.9 and 0.6, negatives 0.8 and 0.2.  Query 1: positive 0.3, negatives 0.1, 0.4, 0.5.
S = torch.tensor([[0.9, 0.6, 0.8, 0.2], [0.1, 0.4, 0.3, 0.5]], dtype=torch.float64)
M = torch.tensor([[True, True, False, False], [False, False, True, False]])


def test_hardest_negative_only():
    # k = 1. Row 0, hardest negative 0.8: [0.8 − 0.9 + 0.3]_+ + [0.8 − 0.6 + 0.3]_+ = 0.2 + 0.5 = 0.7
    #        Row 1, hardest negative 0.5: [0.5 − 0.3 + 0.3]_+ = 0.5.  Mean: 0.6
    assert Triplet(margin=0.3, num_negatives=1)(S, M).item() == pytest.approx(0.6, abs=1e-12)


def test_two_hardest_negatives():
    # k = 2. Row 0 adds negative 0.2: [0.2 − 0.9 + 0.3]_+ = 0 and [0.2 − 0.6 + 0.3]_+ = 0 → 0.7
    #        Row 1 adds negative 0.4: [0.4 − 0.3 + 0.3]_+ = 0.4 → 0.9.  Mean: 0.8
    assert Triplet(margin=0.3, num_negatives=2)(S, M).item() == pytest.approx(0.8, abs=1e-12)


def test_more_negatives_requested_than_the_row_has():
    # Row 0 has 2 negatives, row 1 has 3: k = 10 uses them all.
    # Row 1 adds 0.1: [0.1 − 0.3 + 0.3]_+ = 0.1 → 1.0.  Mean (0.7 + 1.0) / 2 = 0.85
    assert Triplet(margin=0.3, num_negatives=10)(S, M).item() == pytest.approx(0.85, abs=1e-12)


def test_softmax_weighting_of_violating_negatives():
    # k = 2, τ = 0.1. Row 0: for each positive only 0.8 violates, weight 1 → 0.2 + 0.5 = 0.7
    # Row 1: 0.5 and 0.4 both violate; weights e^{5}, e^{4} normalised = e/(e+1), 1/(e+1)
    #        0.5 · 0.73105857863001 + 0.4 · 0.26894142136999 = 0.47310585786300
    w = math.e / (math.e + 1)
    row1 = 0.5 * w + 0.4 * (1 - w)
    assert row1 == pytest.approx(0.47310585786300, abs=1e-12)
    loss = Triplet(margin=0.3, num_negatives=2, softmax_weighting=True, temperature=0.1)(S, M)
    assert loss.item() == pytest.approx((0.7 + row1) / 2, abs=1e-12)


def test_gradient_by_hand():
    # k = 1: each violating (p, n) pair adds +1 to ∂/∂s_n and −1 to ∂/∂s_p; the mean over 2 rows halves it.
    s = S.clone().requires_grad_(True)
    Triplet(margin=0.3, num_negatives=1)(s, M).backward()
    expected = torch.tensor([[-0.5, -0.5, 1.0, 0.0], [0.0, 0.0, -0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(s.grad, expected, rtol=0, atol=1e-12)


def test_weighted_gradient_matches_finite_differences():
    gen = torch.Generator().manual_seed(0)
    s = (torch.rand(3, 7, generator=gen, dtype=torch.float64) * 0.6).requires_grad_(True)
    m = torch.rand(3, 7, generator=gen) < 0.4
    m[:, 0] = True
    loss = Triplet(margin=0.3, num_negatives=3, softmax_weighting=True, temperature=0.2)
    assert torch.autograd.gradcheck(lambda v: loss(v, m), (s,), eps=1e-7, atol=1e-6)


def test_satisfied_margins_cost_nothing():
    s = torch.tensor([[0.9, 0.1, 0.2], [0.2, 0.95, 0.3]])
    m = torch.tensor([[True, False, False], [False, True, False]])
    assert Triplet(margin=0.3, num_negatives=2)(s, m).item() == 0.0


def test_num_negatives_must_be_a_positive_integer():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_negatives"):
            Triplet(num_negatives=bad)
