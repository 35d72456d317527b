"""Networks built on an encoder: the dual encoder and UniDEC's DE / classifier heads."""

from pathlib import Path

from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.unidec import HEADS_CONFIG, SEARCH_MODES, UniDECNet


def load_net(folder: str | Path) -> DualEncoder | UniDECNet:
    """The network saved in ``folder`` by ``net.save(folder)``: UniDEC heads when present, else a dual encoder."""
    if (Path(folder) / HEADS_CONFIG).is_file():
        return UniDECNet.load(folder)
    return DualEncoder.load(folder)


__all__ = ["SEARCH_MODES", "DualEncoder", "UniDECNet", "load_net"]
