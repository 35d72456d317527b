"""UniDEC's symmetric loss and the shared temperature."""

import math

import pytest
import torch

from xdex.losses import PALN, DecoupledSoftmax, SoftmaxCE, Symmetric, Temperature

S = torch.tensor([[1.0, 0.0, -1.0, 0.3], [0.5, 0.5, 0.0, 0.2], [0.2, -0.4, 0.7, 0.1]], dtype=torch.float64)
M = torch.tensor([[True, True, False, False], [False, False, True, False], [False, True, False, False]])


def test_symmetric_equals_the_manual_transpose_computation():
    q2l, l2q = PALN(temperature=0.5), DecoupledSoftmax(temperature=1.0)
    loss = Symmetric(q2l, l2q, q2l_weight=0.3)(S, M)
    expected = 0.3 * q2l(S, M) + 0.7 * l2q(S.T.contiguous(), M.T.contiguous())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)


def test_symmetric_by_hand_with_labels_that_have_no_query():
    # 2 queries x 3 labels; label 2 annotates no query, so its row of Sᵀ is ignored.
    s = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    m = torch.tensor([[True, False, False], [False, True, False]])
    # q2l (τ = 1): each query has one positive scored 1 against (1, 0, 2):  log(e + 1 + e²) − 1
    q2l_row = math.log(math.e + 1 + math.e**2) - 1
    # l2q: labels 0 and 1 score their queries (1, 0) and (0, 1): log(e + 1) − 1 each; label 2 ignored
    l2q_row = math.log(math.e + 1) - 1
    loss = Symmetric(SoftmaxCE(temperature=1.0), q2l_weight=0.5)(s, m)
    assert loss.item() == pytest.approx(0.5 * q2l_row + 0.5 * l2q_row, rel=1e-12)  # 0.5·1.40760596 + 0.5·0.31326169


def test_symmetric_defaults_to_one_shared_loss():
    sym = Symmetric(PALN(temperature=0.1, learnable_temperature=True))
    assert sym.l2q_loss is sym.q2l_loss
    assert len(list(sym.parameters())) == 1


def test_symmetric_rejects_lambda_outside_unit_interval():
    with pytest.raises(ValueError, match="q2l_weight"):
        Symmetric(PALN(), q2l_weight=1.5)


def test_fixed_temperature_scales_by_its_inverse():
    t = Temperature(0.05)
    torch.testing.assert_close(t(torch.tensor([0.5, -1.0])), torch.tensor([10.0, -20.0]))
    assert t.tau == pytest.approx(0.05)
    assert list(t.parameters()) == []


def test_learnable_temperature_receives_a_gradient_and_is_shared():
    t = Temperature(0.5, learnable=True)
    a, b = PALN(temperature=t), DecoupledSoftmax(temperature=t)
    (a(S, M) + b(S, M)).backward()
    assert t.log_scale.grad is not None and t.log_scale.grad.abs().item() > 0
    assert a.temperature is b.temperature


def test_learnable_temperature_is_clamped_at_max_scale():
    t = Temperature(0.5, learnable=True, max_scale=4.0)
    with torch.no_grad():
        t.log_scale.fill_(math.log(1000.0))
    assert t(torch.tensor(1.0)).item() == pytest.approx(4.0)


def test_learnable_flag_on_a_loss_makes_a_parameter():
    loss = SoftmaxCE(temperature=0.05, learnable_temperature=True)
    (param,) = loss.parameters()
    assert param.item() == pytest.approx(-math.log(0.05))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "0.1", True])
def test_bad_temperatures_are_errors(bad):
    with pytest.raises(ValueError, match="temperature"):
        SoftmaxCE(temperature=bad)


def test_a_learnable_flag_cannot_change_a_fixed_module():
    with pytest.raises(ValueError, match="learnable_temperature"):
        SoftmaxCE(temperature=Temperature(0.1), learnable_temperature=True)
