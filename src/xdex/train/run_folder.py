"""The folder of a training run (``xdex train --out DIR``): what it may hold before a run, what a run leaves.

A run writes only into a folder that is new, empty, or an unfinished xdex run of its own (one that holds
``training/config.yaml``), and continues an unfinished run only when asked to (``--resume``): a folder with
anything else in it is refused, so no file of the user's is ever replaced or deleted. A run that fails before
it saved anything but its config leaves the folder as it found it. Temporary files of an interrupted atomic
write (``.NAME.*.tmp``, see :mod:`xdex.atomic`) under ``training/`` are removed when the run starts again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xdex.train import distributed as dist

log = logging.getLogger(__name__)

TRAINING = "training"  # the sub-folder of checkpoints, metrics logs and the run's config
RUN_CONFIG = "config.yaml"
MODEL_MARKER = "meta.json"  # written last by a finished run (xdex.inference.model.MARKER)
SHOWN = 5  # entries named in a refusal


class RunFolderError(FileExistsError):
    """A ``--out`` folder that a run must not write into."""


def unfinished_run(out: Path) -> bool:
    return (out / TRAINING / RUN_CONFIG).is_file() and not (out / MODEL_MARKER).exists()


def refusal(out: Path, resume: bool) -> str | None:
    """Why ``out`` cannot take this run, or None when it can."""
    if (out / MODEL_MARKER).exists():
        done = "its training finished, there is nothing to resume" if resume else "choose another --out"
        return f"{out} already holds a trained model; {done}"
    if out.exists() and not out.is_dir():
        return f"{out} is a file, not a folder; choose another --out"
    if unfinished_run(out):
        if resume:
            return None
        return (f"{out} holds an unfinished xdex run: continue it with --resume, or choose another --out to start "
                "afresh (or delete the folder yourself)")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if entries:
        listed = ", ".join(entries[:SHOWN]) + (f" and {len(entries) - SHOWN} more" if len(entries) > SHOWN else "")
        return (f"{out} is not empty and is not an xdex run (it holds {listed}); xdex writes a model only into a "
                "new or empty folder: choose another --out")
    return None


def remove_stale_temporaries(workdir: Path) -> list[Path]:
    """Delete the temporary files interrupted atomic writes left under ``workdir``; returns them."""
    stale = [p for p in workdir.rglob(".*.tmp") if p.is_file()] if workdir.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted write", path)
    return stale


@contextmanager
def run_folder(out: Path, resume: bool) -> Iterator[None]:
    """Check ``out`` for this run (on rank 0, for every rank), tidy it, and undo a start that failed early.

    Refuses an ``out`` that :func:`refusal` names. When the body fails while ``out`` holds nothing but the run's
    config, that config and the folders this run created are removed, so the same command can run again.
    """
    problem = refusal(out, resume) if dist.is_main() else None
    problem = dist.broadcast_object(problem)
    if problem is not None:
        raise RunFolderError(problem)
    fresh = not out.exists()
    if dist.is_main():
        remove_stale_temporaries(out / TRAINING)
    try:
        yield
    except BaseException:
        if dist.is_main() and not resume:
            _undo_early_start(out, fresh)
        raise


def _undo_early_start(out: Path, fresh: bool) -> None:
    files = [p for p in out.rglob("*") if not p.is_dir()] if out.is_dir() else []
    config = out / TRAINING / RUN_CONFIG
    if files != [config]:  # something was saved (a checkpoint, a linker): leave it all for --resume
        return
    config.unlink()
    if not any((out / TRAINING).iterdir()):
        (out / TRAINING).rmdir()
    if fresh and not any(out.iterdir()):
        out.rmdir()
    log.info("the run stopped before saving anything: removed its config from %s", out)
