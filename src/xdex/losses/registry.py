"""Engine losses by name, so that configuration files can choose and parametrise them."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch import nn

from xdex.losses.bce import BCE
from xdex.losses.decoupled import DecoupledSoftmax
from xdex.losses.pal import PAL, PALN
from xdex.losses.soft_topk import SoftTopK
from xdex.losses.softmax import SoftmaxCE
from xdex.losses.symmetric import Symmetric
from xdex.losses.triplet import Triplet

LOSSES: dict[str, type[nn.Module]] = {
    "triplet": Triplet,
    "softmax": SoftmaxCE,
    "infonce": SoftmaxCE,
    "decoupled_softmax": DecoupledSoftmax,
    "soft_topk": SoftTopK,
    "paln": PALN,
    "supcon": PALN,
    "pal": PAL,
    "bce": BCE,
}
"""Name → engine loss class; every one is called as ``loss(scores, positives)``."""

SYMMETRIC = "symmetric"


def build_loss(name: str, **params: Any) -> nn.Module:
    """The engine loss called ``name`` built with ``params``, e.g. ``build_loss("paln", temperature=0.05)``.

    Names are case-insensitive and "-" may stand for "_". ``"symmetric"`` wraps other losses
    (UniDEC's L_D): ``build_loss("symmetric", q2l={"name": "paln"}, l2q=None, q2l_weight=0.5)``, where
    ``q2l`` and ``l2q`` are a name or a mapping with a ``name`` and that loss's parameters.
    Unknown names or parameters raise ValueError listing the valid ones.
    """
    key = _normalise(name)
    if key == SYMMETRIC:
        if "lam" in params:
            raise ValueError("loss 'symmetric': 'lam' is now called 'q2l_weight' (the weight of the query-to-label "
                             "direction; the label-to-query direction gets 1 - q2l_weight)")
        _check_params(key, params, {"q2l", "l2q", "q2l_weight"})
        if "q2l" not in params:
            raise ValueError("loss 'symmetric' needs q2l: the query-to-label loss, a name or a mapping with a 'name'")
        l2q = params.get("l2q")
        return Symmetric(
            _build_spec(params["q2l"], "q2l"),
            None if l2q is None else _build_spec(l2q, "l2q"),
            q2l_weight=params.get("q2l_weight", 0.5),
        )
    if key not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid names: {', '.join(sorted([*LOSSES, SYMMETRIC]))}")
    cls = LOSSES[key]
    _check_params(key, params, set(inspect.signature(cls).parameters))
    return cls(**params)


def _normalise(name: str) -> str:
    if not isinstance(name, str):
        raise ValueError(f"a loss name must be a string, got {name!r}")
    return name.strip().lower().replace("-", "_")


def _check_params(key: str, params: Mapping[str, Any], valid: set[str]) -> None:
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for loss {key!r}; valid parameters: {', '.join(sorted(valid))}"
        )


def _build_spec(spec: str | Mapping[str, Any], role: str) -> nn.Module:
    if isinstance(spec, str):
        return build_loss(spec)
    if isinstance(spec, Mapping) and "name" in spec:
        params = dict(spec)
        inner = params.pop("name")
        if _normalise(inner) == SYMMETRIC:
            raise ValueError(f"{role} of a symmetric loss cannot itself be symmetric")
        return build_loss(inner, **params)
    raise ValueError(f"{role} must be a loss name or a mapping with a 'name', got {spec!r}")
