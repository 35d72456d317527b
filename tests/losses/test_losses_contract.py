"""The contract every engine loss keeps: rows without positives ignored, no NaN, clear input errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.losses import BCE, PAL, PALN, DecoupledSoftmax, SoftmaxCE, SoftTopK, Symmetric, Triplet


def engine_losses():
    return {
        "softmax": SoftmaxCE(),
        "decoupled": DecoupledSoftmax(),
        "decoupled_normalized": DecoupledSoftmax(normalize=True),
        "paln": PALN(learnable_temperature=True),
        "pal": PAL(),
        "soft_topk": SoftTopK(k=2),
        "triplet": Triplet(num_negatives=2),
        "triplet_weighted": Triplet(num_negatives=2, softmax_weighting=True, learnable_temperature=True),
        "bce": BCE(),
        "symmetric": Symmetric(PALN()),
    }


LOSS_NAMES = list(engine_losses())
GEN = torch.Generator().manual_seed(0)
SCORES = torch.rand(4, 6, generator=GEN, dtype=torch.float64) * 2 - 1
MASK = torch.tensor(
    [
        [True, False, True, False, False, False],
        [False, True, False, False, False, False],
        [True, True, True, False, False, True],
        [False, False, False, True, False, False],
    ]
)


# Symmetric is left out: there an extra query is also an extra pool entry of every label row of Sᵀ
# (its ignored label rows are checked in test_symmetric_by_hand_with_labels_that_have_no_query).
@pytest.mark.parametrize("name", [n for n in LOSS_NAMES if n != "symmetric"])
def test_rows_without_positives_are_ignored(name):
    loss = engine_losses()[name]
    extra = torch.tensor([[5.0, -3.0, 2.0, 0.0, 1.0, -1.0]], dtype=torch.float64)
    with_empty_row = loss(torch.cat([SCORES, extra]), torch.cat([MASK, torch.zeros(1, 6, dtype=torch.bool)]))
    assert with_empty_row.item() == pytest.approx(loss(SCORES, MASK).item(), rel=1e-12)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_degenerate_rows_give_finite_losses_and_gradients(name):
    loss = engine_losses()[name]
    scores = torch.tensor(
        [[1e4, -1e4, 3.0, 0.5], [0.2, 0.1, -0.3, 0.4], [1.0, 2.0, 3.0, 4.0], [-1e4, 1e4, 0.0, 0.0]],
        dtype=torch.float64,
        requires_grad=True,
    )
    # an all-positive row (no negatives), a row without positives, huge scores
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 1]], dtype=torch.bool)
    value = loss(scores, mask)
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(scores.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in loss.parameters())


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_a_batch_without_positives_costs_zero(name):
    scores = SCORES.clone().requires_grad_(True)
    value = engine_losses()[name](scores, torch.zeros_like(MASK))
    value.backward()
    assert value.item() == 0.0
    assert torch.equal(scores.grad, torch.zeros_like(scores))


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_half_precision_scores_are_computed_in_float32(name):
    rounded = SCORES.to(torch.bfloat16)
    value = engine_losses()[name](rounded, MASK)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(engine_losses()[name](rounded.double(), MASK).item(), rel=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.permutations(list(range(6))), st.sampled_from(LOSS_NAMES))
def test_the_order_of_the_pool_does_not_matter(order, name):
    loss = engine_losses()[name]
    assert loss(SCORES[:, order], MASK[:, order]).item() == pytest.approx(loss(SCORES, MASK).item(), rel=1e-9)


@pytest.mark.parametrize(
    ("scores", "positives", "message"),
    [
        (torch.zeros(3), torch.zeros(3, dtype=torch.bool), "2-D floating-point"),
        (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.bool), "2-D floating-point"),
        (torch.zeros(2, 3), torch.zeros(2, 3), "bool tensor"),
        (torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.bool), r"shape \(3, 2\) but scores has shape \(2, 3\)"),
        (torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.bool), "pool is empty"),
    ],
)
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_bad_inputs_are_named(name, scores, positives, message):
    with pytest.raises(ValueError, match=message):
        engine_losses()[name](scores, positives)
