"""Networks built on an encoder: the dual encoder, UniDEC's DE / classifier heads, DEXA's fused classifiers
and auxiliary vectors, OAK's augmentation block; each registers its type with :mod:`xdex.modules.registry`."""

from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.fusion import ClassifierFusionNet
from xdex.modules.network import Network
from xdex.modules.oak import Augmentation, OakNet
from xdex.modules.registry import NETWORKS, load_net, network_type, register_network
from xdex.modules.unidec import SEARCH_MODES, UniDECNet

__all__ = [
    "NETWORKS", "SEARCH_MODES", "Augmentation", "AuxiliaryVectors", "ClassifierFusionNet", "DualEncoder", "Network",
    "OakNet", "UniDECNet", "load_net", "network_type", "register_network",
]
