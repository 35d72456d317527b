"""Training checkpoints that load without running code.

A checkpoint is read with ``torch.load(weights_only=True)``: PyTorch's restricted unpickler builds tensors,
numbers, strings, lists, tuples and dicts and refuses everything else, so a crafted file cannot call a
function. Everything a checkpoint holds is therefore one of those: the objective's numpy arrays (label
clusters, hard-negative shortlists) are stored as tensors and given back as arrays. A list of 1-D arrays of one
dtype (the query clusters: thousands of short arrays) is stored packed, one tensor of their values and one of
their sizes, rather than as a tensor and an archive record each (2,700 of them, about 0.17 s of pickling a
checkpoint for `unidec` on gcide-links-titles; docs/benchmarks.md, "Checkpoints beside the training"). A file that
cannot be read that way, or that lacks the expected entries, is refused with a message naming it; nothing of it is
used.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xdex.atomic import atomic_path

FORMAT = 1  # "xdex_checkpoint": the layout below; a checkpoint of another format is refused
PACKED = "xdex_packed_arrays"  # a packed list of 1-D arrays: {PACKED: their values, joined; "sizes": their lengths}
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


class CheckpointWriter:
    """Writes checkpoints on a thread of its own, one at a time, so that training goes on while a file is written.

    :meth:`save` copies the state's tensors and arrays (training changes them in place), waits for the file before
    it, and hands the copy to the thread; :meth:`close` waits for the last file and raises what its write raised,
    so a fit that has closed its writer has its checkpoint on disk. Each write is atomic: a process that dies while
    one is under way keeps the checkpoint before it. For `unidec` on gcide-links-titles the training thread's share
    of a checkpoint fell from 0.3-0.7 s to 0.03 s; at 10^5 labels (620 MB) the write slows the steps about as much
    (docs/benchmarks.md, "Checkpoints beside the training").
    """

    def __init__(self) -> None:
        self._thread: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def save(self, path: Path, state: dict[str, Any], keep: tuple[str, ...] = ()) -> None:
        """Write ``state`` to ``path`` (as :func:`save_checkpoint`) in the background; the entries named in
        ``keep`` are not copied (their holder never changes them in place)."""
        self.wait()
        copied = {name: value if name in keep else _copied(value) for name, value in state.items()}
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="xdex-checkpoint")
        self._pending = self._thread.submit(save_checkpoint, path, copied)

    def wait(self) -> None:
        """Block until the last checkpoint is written; raise its write's error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """:meth:`wait`, then end the thread (a later :meth:`save` starts another)."""
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._thread.shutdown()
                self._thread = None


def _copied(value: Any) -> Any:
    """``value`` with its tensors and arrays copied."""
    return _rebuilt(value, lambda x: x.detach().clone() if isinstance(x, torch.Tensor)
                    else x.copy() if isinstance(x, np.ndarray) else _WALK)


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
    try:
        state["objective"] = _tensors_to_arrays(state["objective"])
    except ValueError as e:
        raise CheckpointError(f"{path}: damaged training checkpoint ({e}); {advice}") from None
    return state


def _arrays_to_tensors(value: Any) -> Any:
    """``value`` with its numpy arrays as tensors, a list of 1-D arrays of one dtype packed (:data:`PACKED`)."""
    def leaf(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(x))
        if _packable(x):
            return {PACKED: torch.from_numpy(np.concatenate(x)),
                    "sizes": torch.tensor([len(a) for a in x], dtype=torch.int64)}
        return _WALK

    return _rebuilt(value, leaf)


def _packable(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of 1-D numpy arrays of one dtype (stored packed)."""
    return (isinstance(value, list) and bool(value) and isinstance(value[0], np.ndarray)
            and all(isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == value[0].dtype for a in value))


def _unpacked(packed: dict) -> list[np.ndarray]:
    """The list of arrays a :data:`PACKED` entry holds; ValueError where its sizes do not split its values."""
    values, sizes = packed[PACKED], packed["sizes"]
    if not (isinstance(values, torch.Tensor) and isinstance(sizes, torch.Tensor) and values.ndim == 1
            and sizes.ndim == 1 and sizes.dtype == torch.int64 and len(sizes) > 0 and bool((sizes >= 0).all())
            and int(sizes.sum()) == len(values)):
        raise ValueError("a packed list of arrays whose sizes do not split its values")
    return np.split(values.cpu().numpy(), np.cumsum(sizes.cpu().numpy())[:-1])


def _tensors_to_arrays(value: Any) -> Any:
    """``value`` with its tensors as numpy arrays and its :data:`PACKED` entries as lists of arrays."""
    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.cpu().numpy()
        if isinstance(x, dict) and set(x) == {PACKED, "sizes"}:
            return _unpacked(x)
        return _WALK

    return _rebuilt(value, leaf)


_WALK = object()  # what a leaf function of _rebuilt returns for a value it leaves to the walk


def _rebuilt(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``leaf(value)``, or where it gives :data:`_WALK`, dicts, lists and tuples rebuilt around their items' own
    ``_rebuilt`` and anything else as it is."""
    out = leaf(value)
    if out is not _WALK:
        return out
    if isinstance(value, dict):
        return {k: _rebuilt(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuilt(v, leaf) for v in value)
    return value
