"""WeightedSum: L = Σ w_i · L_i over named terms, each term's mean kept for the log."""

import pytest
import torch

from xdex.losses import WeightedSum


def test_the_sum_is_weighted_and_every_term_recorded_unweighted():
    terms = WeightedSum({"de": 0.4, "clf": 0.6, "bce": 0.0})
    a, b = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    total = terms(de=a, clf=b)
    assert total.item() == pytest.approx(0.4 * 2 + 0.6 * 3)
    total.backward()
    assert (a.grad.item(), b.grad.item()) == pytest.approx((0.4, 0.6))
    terms(de=torch.tensor(4.0), clf=torch.tensor(1.0))
    assert terms.summary() == pytest.approx({"loss_de": 3.0, "loss_clf": 2.0})
    assert terms.needs("clf") and not terms.needs("bce") and not terms.needs("other")
    terms.reset()
    assert terms.summary() == {}


def test_bad_terms_and_weights_are_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        WeightedSum({"a": -1.0})
    terms = WeightedSum({"a": 1.0})
    with pytest.raises(KeyError, match="without a weight: b"):
        terms(a=torch.tensor(1.0), b=torch.tensor(2.0))
    with pytest.raises(ValueError, match="no loss term"):
        terms()
