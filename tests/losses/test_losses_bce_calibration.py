"""OvA binary cross-entropy (DEXML Eq. 2) and OAK's MI calibration loss (OAK Eq. 6)."""

import math

import pytest
import torch
import torch.nn.functional as F

from xdex.losses import BCE, MICalibration


def test_bce_matches_eq2_by_hand():
    # One query, scores (2, −1, 0), positive label 0:
    # −log σ(2) = log(1 + e^-2) = 0.12692801104297; −log(1 − σ(−1)) = log(1 + e^-1) = 0.31326168751822;
    # −log(1 − σ(0)) = log 2 = 0.69314718055995.  Mean over the pool of 3: 0.37777895970705
    s = torch.tensor([[2.0, -1.0, 0.0]], dtype=torch.float64)
    m = torch.tensor([[True, False, False]])
    terms = (math.log(1 + math.exp(-2)), math.log(1 + math.exp(-1)), math.log(2))
    assert sum(terms) / 3 == pytest.approx(0.37777895970705, rel=1e-12)
    assert BCE()(s, m).item() == pytest.approx(0.37777895970705, rel=1e-12)
    # pos_weight 2 doubles the positive term: (2·0.12692801104297 + 0.31326168751822 + 0.69314718055995) / 3
    assert BCE(pos_weight=2.0)(s, m).item() == pytest.approx(0.42008829672137, rel=1e-12)


def test_bce_with_positives_in_every_row_is_the_elementwise_mean():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    m = torch.rand(4, 6, generator=gen) < 0.3
    m[:, 0] = True
    expected = F.binary_cross_entropy_with_logits(s / 2.0, m.double())
    assert BCE(temperature=2.0)(s, m).item() == pytest.approx(expected.item(), rel=1e-12)


def test_bce_rejects_a_non_positive_weight():
    with pytest.raises(ValueError, match="pos_weight"):
        BCE(pos_weight=0.0)


def test_mi_calibration_matches_eq6_by_hand():
    # x = plain, x̂ = enriched, y = labels; δ = +1 for related pairs, −1 otherwise.
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    x_hat = torch.tensor([[0.5, 0.5], [0.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    related = torch.tensor([[True, False, False], [False, True, True]])
    # x·yᵀ  = [[1, 0, 1], [0, 1, 1]];  x̂·yᵀ = [[0.5, 0.5, 1], [0, 2, 2]]
    # difference x·yᵀ − x̂·yᵀ = [[0.5, −0.5, 0], [0, −1, −1]]
    # CD = δ·difference = [[0.5, 0.5, 0], [0, −1, −1]];  γ = 0.2: [CD + γ]_+ = [[0.7, 0.7, 0.2], [0.2, 0, 0]]
    # L = (0.7 + 0.7 + 0.2 + 0.2) / N, N = 2 documents → 0.9
    assert MICalibration(gamma=0.2)(x, x_hat, y, related).item() == pytest.approx(0.9, abs=1e-12)


def test_mi_calibration_gradient_moves_enriched_scores_the_right_way():
    # Descending the loss raises the enriched score of a related label and lowers an unrelated one.
    x = torch.tensor([[1.0, 0.0]])
    x_hat = torch.tensor([[0.6, 0.6]], requires_grad=True)
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    MICalibration(gamma=0.1)(x, x_hat, y, torch.tensor([[True, False]])).backward()
    # CD = [1 − 0.6, −(0 − 0.6)] = [0.4, 0.6], both active: ∂L/∂x̂ = −y_0 + y_1 = (−1, 1)
    torch.testing.assert_close(x_hat.grad, torch.tensor([[-1.0, 1.0]]))


def test_mi_calibration_shape_errors_are_named():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="x_hat has shape"):
        MICalibration(0.1)(x, torch.zeros(2, 4), torch.zeros(5, 3), torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="y has dimension"):
        MICalibration(0.1)(x, x, torch.zeros(5, 4), torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="positives has shape"):
        MICalibration(0.1)(x, x, torch.zeros(5, 3), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="positives must be a bool"):
        MICalibration(0.1)(x, x, torch.zeros(5, 3), torch.zeros(2, 5))
