"""Training checkpoints that load without running code.

A checkpoint is read with ``torch.load(weights_only=True)``: PyTorch's restricted unpickler builds tensors,
numbers, strings, lists, tuples and dicts and refuses everything else, so a crafted file cannot call a
function. Everything a checkpoint holds is therefore one of those: the objective's numpy arrays (label
clusters, hard-negative shortlists) are stored as tensors and given back as arrays. A file that cannot be
read that way, or that lacks the expected entries, is refused with a message naming it; nothing of it is used.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xdex.atomic import atomic_path

FORMAT = 1  # "xdex_checkpoint": the layout below; a checkpoint of another format is refused
ENTRIES = {  # entry -> the types it may have
    "epoch": (int,),
    "model": (dict,),
    "optimizers": (list,),
    "schedulers": (list,),
    "objective": (dict,),
    "history": (list,),
    "best": (list, tuple),
}


class CheckpointError(ValueError):
    """A checkpoint file that xdex does not trust or cannot use."""


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` (the :data:`ENTRIES`) atomically; numpy arrays in ``state["objective"]`` become tensors."""
    state = {"xdex_checkpoint": FORMAT, **state, "objective": _arrays_to_tensors(state["objective"])}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`, read without running code and checked for its form."""
    advice = "delete it (or choose another --out) to start the run afresh"
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, OSError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: not a training checkpoint xdex can read safely ({reason[:300]}); "
                              f"{advice}") from None
    if not isinstance(state, dict) or state.get("xdex_checkpoint") != FORMAT:
        raise CheckpointError(f"{path}: not an xdex training checkpoint of format {FORMAT} (written by another "
                              f"program or another xdex version); {advice}")
    for name, types in ENTRIES.items():
        if not isinstance(state.get(name), types):
            raise CheckpointError(f"{path}: damaged training checkpoint (entry {name!r} is missing or of the wrong "
                                  f"type); {advice}")
    best = state["best"]
    if len(best) != 3 or not (best[2] is None or isinstance(best[2], dict)):
        raise CheckpointError(f"{path}: damaged training checkpoint (entry 'best'); {advice}")
    state["objective"] = _tensors_to_arrays(state["objective"])
    return state


def _arrays_to_tensors(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {k: _arrays_to_tensors(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_arrays_to_tensors(v) for v in value)
    return value


def _tensors_to_arrays(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu().numpy()
    if isinstance(value, dict):
        return {k: _tensors_to_arrays(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_tensors_to_arrays(v) for v in value)
    return value
