"""One registry of network types, used to write and to load them.

Every network class registers under the ``type`` its ``heads.json`` records (``modules/heads_storage.py``); a
plain dual encoder writes no ``heads.json``. :func:`load_net` reads that type and calls the class's ``load``,
handing in the model directories of its ``model_subfolders`` (OAK's linker), which the inference layer loads:
a network never loads whole models itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from xdex.jsonfile import read_json
from xdex.modules.heads_storage import HEADS_CONFIG
from xdex.modules.network import Network

N = TypeVar("N", bound=type[Network])
PLAIN = "dual_encoder"  # the type of a network without heads.json
NETWORKS: dict[str, type[Network]] = {}


def register_network(kind: str) -> Callable[[N], N]:
    """Class decorator: the network type ``kind`` is read and written by this class."""
    def add(cls: N) -> N:
        if NETWORKS.get(kind, cls) is not cls:
            raise ValueError(f"the network type {kind!r} is already taken by {NETWORKS[kind].__name__}")
        cls.kind = kind
        NETWORKS[kind] = cls
        return cls
    return add


def network_type(folder: str | Path) -> type[Network]:
    """The class of the network saved in ``folder``: its ``heads.json`` type, else a plain dual encoder."""
    path = Path(folder) / HEADS_CONFIG
    if not path.is_file():
        return NETWORKS[PLAIN]
    config = read_json(path)
    kind = config.get("type") if isinstance(config, dict) else None
    if kind not in NETWORKS:
        raise ValueError(f"{path}: unknown network type {kind!r}; expected one of {', '.join(NETWORKS)} (a network "
                         "of a plug-in loads once the module that registers it is imported)")
    return NETWORKS[kind]


def load_net(folder: str | Path, load_model: Callable[[Path], Any] | None = None) -> Network:
    """The network saved in ``folder``; ``load_model`` loads the model directories it holds (``model_subfolders``,
    e.g. OAK's ``linker/``), which are handed to its ``load``."""
    cls = network_type(folder)
    if cls.model_subfolders and load_model is None:
        raise ValueError(f"{folder}: a {cls.kind} network holds model directories of its own "
                         f"({', '.join(cls.model_subfolders)}); load the model directory instead")
    parts: Mapping[str, Any] = {name: load_model(Path(folder) / name) for name in cls.model_subfolders} \
        if load_model is not None else {}
    return cls.load(folder, parts)
