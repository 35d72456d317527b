"""Networks built on an encoder: the dual encoder, UniDEC's DE / classifier heads, DEXA's fused classifiers
and auxiliary vectors, OAK's augmentation block."""

from pathlib import Path

from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.fusion import ClassifierFusionNet
from xdex.modules.heads import HEADS_CONFIG
from xdex.modules.oak import Augmentation, OakNet
from xdex.modules.unidec import SEARCH_MODES, UniDECNet
from xdex.text.jsonfile import read_json


def load_net(folder: str | Path) -> DualEncoder | UniDECNet | ClassifierFusionNet | OakNet:
    """The network saved in ``folder`` by ``net.save(folder)``: its ``heads.json`` type (UniDEC heads, DEXA
    classifiers, OAK), else a plain dual encoder."""
    path = Path(folder) / HEADS_CONFIG
    if not path.is_file():
        return DualEncoder.load(folder)
    config = read_json(path)
    kind = config.get("type") if isinstance(config, dict) else None
    loaders = {"unidec": UniDECNet.load, "fusion": ClassifierFusionNet.load, "oak": OakNet.load}
    if kind not in loaders:
        raise ValueError(f"{path}: unknown network type {kind!r}; expected one of {', '.join(loaders)}")
    return loaders[kind](folder)


__all__ = ["SEARCH_MODES", "Augmentation", "AuxiliaryVectors", "ClassifierFusionNet", "DualEncoder", "OakNet",
           "UniDECNet", "load_net"]
