"""Building losses by name, as configuration files do."""

import pytest

from xdex.losses import BCE, LOSSES, PAL, PALN, DecoupledSoftmax, SoftmaxCE, SoftTopK, Symmetric, Triplet, build_loss


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("triplet", Triplet),
        ("softmax", SoftmaxCE),
        ("infonce", SoftmaxCE),
        ("decoupled_softmax", DecoupledSoftmax),
        ("soft_topk", SoftTopK),
        ("paln", PALN),
        ("supcon", PALN),
        ("pal", PAL),
        ("bce", BCE),
    ],
)
def test_every_name_builds_its_loss(name, cls):
    assert type(build_loss(name)) is cls
    assert LOSSES[name] is cls


def test_parameters_reach_the_loss_and_names_are_forgiving():
    loss = build_loss("Decoupled-Softmax", temperature=0.1, normalize=True)
    assert isinstance(loss, DecoupledSoftmax)
    assert loss.temperature.tau == pytest.approx(0.1) and loss.normalize
    assert build_loss("soft_topk", k=10, alpha=3.0).k == 10


def test_unknown_name_lists_the_valid_ones():
    valid = "bce, decoupled_softmax, infonce, pal, paln, soft_topk, softmax, supcon, symmetric, triplet"
    with pytest.raises(ValueError, match=rf"unknown loss 'hinge'; valid names: {valid}$"):
        build_loss("hinge")


def test_unknown_parameter_lists_the_valid_ones():
    message = r"unknown parameter\(s\) tau for loss 'paln'; valid parameters: learnable_temperature, temperature$"
    with pytest.raises(ValueError, match=message):
        build_loss("paln", tau=0.1)


def test_bad_parameter_values_are_value_errors():
    with pytest.raises(ValueError, match="temperature"):
        build_loss("softmax", temperature=-1)


def test_symmetric_from_a_specification():
    loss = build_loss("symmetric", q2l={"name": "paln", "temperature": 0.05}, q2l_weight=0.25)
    assert isinstance(loss, Symmetric) and loss.q2l_weight == 0.25
    assert isinstance(loss.q2l_loss, PALN) and loss.l2q_loss is loss.q2l_loss
    both = build_loss("symmetric", q2l="paln", l2q={"name": "decoupled_softmax"})
    assert isinstance(both.l2q_loss, DecoupledSoftmax)


def test_bad_symmetric_specifications():
    with pytest.raises(ValueError, match="needs q2l"):
        build_loss("symmetric")
    with pytest.raises(ValueError, match="mapping with a 'name'"):
        build_loss("symmetric", q2l={"temperature": 0.1})
    with pytest.raises(ValueError, match="cannot itself be symmetric"):
        build_loss("symmetric", q2l={"name": "symmetric", "q2l": "paln"})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) beta"):
        build_loss("symmetric", q2l="paln", beta=2)
