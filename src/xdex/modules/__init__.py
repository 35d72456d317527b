"""Networks built on an encoder: the dual encoder, UniDEC's DE / classifier heads, DEXA's fused classifiers
and auxiliary vectors, OAK's augmentation block."""

from collections.abc import Callable
from pathlib import Path

from xdex.jsonfile import read_json
from xdex.modules.auxiliary import AuxiliaryVectors
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.fusion import ClassifierFusionNet
from xdex.modules.heads_storage import HEADS_CONFIG
from xdex.modules.network import Network
from xdex.modules.oak import LINKER_DIR, Augmentation, Linker, OakNet
from xdex.modules.unidec import SEARCH_MODES, UniDECNet


def load_net(folder: str | Path, load_linker: Callable[[Path], Linker] | None = None
             ) -> DualEncoder | UniDECNet | ClassifierFusionNet | OakNet:
    """The network saved in ``folder`` by ``net.save(folder)``: its ``heads.json`` type (UniDEC heads, DEXA
    classifiers, OAK), else a plain dual encoder. An OAK network needs ``load_linker``, which loads the model
    directory ``folder/linker`` (networks never load whole models themselves)."""
    path = Path(folder) / HEADS_CONFIG
    if not path.is_file():
        return DualEncoder.load(folder)
    config = read_json(path)
    kind = config.get("type") if isinstance(config, dict) else None
    if kind == "oak":
        if load_linker is None:
            raise ValueError(f"{folder}: an OAK network needs its linker; load the model directory instead")
        return OakNet.load(folder, load_linker(Path(folder) / LINKER_DIR))
    loaders: dict[str, Callable[[str | Path], UniDECNet | ClassifierFusionNet]] = {
        "unidec": UniDECNet.load, "fusion": ClassifierFusionNet.load}
    if kind not in loaders:
        raise ValueError(f"{path}: unknown network type {kind!r}; expected one of {', '.join([*loaders, 'oak'])}")
    return loaders[kind](folder)


__all__ = [
    "SEARCH_MODES", "Augmentation", "AuxiliaryVectors", "ClassifierFusionNet", "DualEncoder", "Network", "OakNet",
    "UniDECNet", "load_net",
]
