"""Training losses for dual encoders and classifiers over a batch's label pool.

Engine losses are called as ``loss(scores[B, P], positives[B, P])`` (see :mod:`xdex.losses.base`);
:func:`build_loss` makes them by name. :class:`MICalibration` works on embeddings instead.
"""

from xdex.losses.base import PoolLoss
from xdex.losses.bce import BCE
from xdex.losses.calibration import MICalibration
from xdex.losses.decoupled import DecoupledSoftmax
from xdex.losses.pal import PAL, PALN, SupCon
from xdex.losses.registry import LOSSES, build_loss
from xdex.losses.soft_topk import SoftTopK, log_soft_top_k, soft_top_k_threshold
from xdex.losses.softmax import InfoNCE, SoftmaxCE
from xdex.losses.symmetric import Symmetric
from xdex.losses.temperature import Temperature
from xdex.losses.triplet import Triplet
from xdex.losses.weighted import WeightedSum

__all__ = [
    "BCE",
    "LOSSES",
    "PAL",
    "PALN",
    "DecoupledSoftmax",
    "InfoNCE",
    "MICalibration",
    "PoolLoss",
    "SoftTopK",
    "SoftmaxCE",
    "SupCon",
    "Symmetric",
    "Temperature",
    "Triplet",
    "WeightedSum",
    "build_loss",
    "log_soft_top_k",
    "soft_top_k_threshold",
]
