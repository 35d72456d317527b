"""What every benchmark script shares: where the data is, runs in a process of their own, the machine
line, timing, memory, and publishing a section of docs/benchmarks.md.

Run the scripts as modules from the repository root (``python -m benchmarks.bench_quality ...``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from xdex.atomic import atomic_write_text

log = logging.getLogger("benchmarks")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
DATA_ROOT_ENV = "XDEX_DATA_ROOT"
DATA_ROOT_HELP = f"${DATA_ROOT_ENV}, else ../shared/data beside the repository"
T = TypeVar("T")


# --- data ------------------------------------------------------------------------------------------

def data_root() -> Path:
    """The folder of the dataset folders: ``$XDEX_DATA_ROOT``, else ``../shared/data`` beside the repository."""
    value = os.environ.get(DATA_ROOT_ENV)
    return Path(value) if value else REPO.parent / "shared" / "data"


# --- runs in a process of their own ------------------------------------------------------------------

class RunFailed(RuntimeError):
    """An isolated run that exited with an error or wrote no result; the message says how."""


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the repository on ``PYTHONPATH`` (so ``-m benchmarks.X`` runs from
    anywhere) and ``extra`` on top."""
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return os.environ | {"PYTHONPATH": os.pathsep.join(paths)} | (extra or {})


def add_isolation_args(parser: Any) -> None:
    """The hidden ``--one JOB --result FILE`` arguments with which :func:`run_isolated` starts a script."""
    import argparse

    parser.add_argument("--one", help=argparse.SUPPRESS)  # a job to run in this process (JSON)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)  # where --one writes its record


def write_result(path: Path, record: Any) -> None:
    """The isolated side: write the job's record (JSON) for :func:`run_isolated` to read."""
    atomic_write_text(path, json.dumps(record))


def run_isolated(module: str, job: dict, *, args: Sequence[str] = (), env: dict[str, str] | None = None) -> Any:
    """``python -m module --one JOB --result FILE *args`` in a fresh Python process, so that its peak memory
    is its own and a crash loses only that run; returns the record it wrote, or raises :class:`RunFailed`.

    The process's stdout goes to stderr, so that libraries that print keep off the tables.
    """
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", module, "--one", json.dumps(job), "--result", str(out), *args]
        code = subprocess.run(command, stdout=sys.stderr, env=python_env(env), check=False).returncode
        if code == 0 and out.exists():
            return json.loads(out.read_text(encoding="utf-8"))
    log.error("%s %s failed (exit code %d); its messages are above", module, json.dumps(job), code)
    raise RunFailed(f"exit code {code}")


def command_line(module: str, argv: Sequence[str], prefix: str = "") -> str:
    """The shell command that runs ``module`` with ``argv``, as the docs show it."""
    return prefix + shlex.join(["python", "-m", module, *argv])


# --- the machine -------------------------------------------------------------------------------------

def vectors_file(parser: Any, path: Path | None, needed: int, option: str) -> Any:
    """The ``.npy`` of vectors at ``path``, memory-mapped (None without a path); ``parser.error`` when it holds
    fewer than ``needed`` rows, naming ``option``, the command-line option that asks for them."""
    import numpy as np

    if path is None:
        return None
    vectors = np.load(path, mmap_mode="r")
    if len(vectors) < needed:
        parser.error(f"{path} holds {len(vectors)} vectors, fewer than {option} asks")
    return vectors


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else its architecture."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {platform.machine()}"
    return platform.processor() or platform.machine()


def load_average() -> float:
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def machine_line(load: Sequence[float] = (), torch_note: str | None = "") -> str:
    """``2 CPU cores (model), Python 3.x, torch 2.x{torch_note}, 1-minute load average 1.0 at the start
    [and 1.2 at the end]``, without a final full stop; no torch with ``torch_note=None``, no load without ``load``."""
    parts = [f"{os.cpu_count()} CPU cores ({cpu_model()})", f"Python {platform.python_version()}"]
    if torch_note is not None:
        from importlib.metadata import version

        parts.append(f"torch {version('torch')}{torch_note}")
    if load:
        ends = " and ".join(f"{value:.1f} {when}" for value, when in zip(load, ("at the start", "at the end"), strict=False))
        parts.append(f"1-minute load average {ends}")
    return ", ".join(parts)


Goal = tuple[str, str | None, bool]
"""A goal as a benchmark checks it: what it asks (``one text p50 ≤ 1.5 ms``), the figure measured (None: not
measured in this run) and whether the figure meets it."""


def goals_line(goals: Sequence[Goal]) -> str:
    """``Goals: G1: met (figure); G2: NOT met (figure); G3: not measured in this run.``, the figures beside the goals
    they are measured against."""
    parts = [f"{goal}: not measured in this run" if figure is None
             else f"{goal}: {'met' if met else 'NOT met'} ({figure})" for goal, figure, met in goals]
    return "Goals: " + "; ".join(parts) + "."


# --- timing and memory ---------------------------------------------------------------------------------

def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """``fn(*args, **kwargs)`` and its wall time in seconds."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def repeat(fn: Callable[[], Any], n: int, warmup: int = 0) -> list[float]:
    """Wall seconds of each of ``n`` calls of ``fn``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return [timed(fn)[1] for _ in range(n)]


def median(times: Sequence[float]) -> float:
    return float(statistics.median(times))


def speedup(reference: Sequence[float], times: Sequence[float]) -> float:
    """How many times faster ``times`` are than ``reference`` (measured in the same run): the ratio of medians."""
    return median(reference) / median(times)


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MB: Linux's VmHWM, which starts afresh at exec.

    ``ru_maxrss`` is the fallback where there is no /proc; on Linux it would include the parent's peak.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def rss_mb() -> float:
    """Resident memory of this process now, in MB (Linux's VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


def training_history(model_dir: Path) -> list[dict]:
    """The trainer's per-epoch records of a run (``MODEL_DIR/training/metrics.jsonl``: loss, ``seconds``,
    validation metrics), or FileNotFoundError naming the log where the run left none."""
    from xdex.train.run_folder import TRAINING
    from xdex.train.trainer import METRICS_LOG

    path = Path(model_dir) / TRAINING / METRICS_LOG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no training log in the model directory")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# --- publishing ------------------------------------------------------------------------------------------

def update_section(title: str, section: str, path: Path = DOCS) -> None:
    """Replace the section headed ``title`` (a `## ` line that ``section`` starts with), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + section
    atomic_write_text(path, text)


def publish(section: str, write: bool, path: Path = DOCS) -> None:
    """Print ``section``; with ``write``, also put it in place of its `## ` section of ``path``."""
    print(section)
    if write:
        update_section(section.split("\n", 1)[0], section, path)


# --- training steps ----------------------------------------------------------------------------------------

def step_trainer(objective: Any, config: Any, total_steps: int) -> Any:
    """A :class:`xdex.train.Trainer` of ``objective`` (its model moved to the configured device, in training
    mode) with the optimisers of ``config`` (a ``TrainerConfig``) and schedules over ``total_steps``, ready for
    ``Trainer.step`` outside ``fit``; it writes nothing."""
    from xdex.train.optim import build_optimizers, build_schedulers
    from xdex.train.trainer import Trainer

    trainer = Trainer(objective, config, workdir=tempfile.gettempdir())  # no fit: no checkpoint is written
    trainer.model.train()
    trainer.optimizers = build_optimizers(trainer.model, config.optim)
    trainer.schedulers = build_schedulers(trainer.optimizers, total_steps, config.optim)
    return trainer


def synchronised_step(trainer: Any, batch: Any) -> float:
    """``trainer.step(batch)``, returning once a GPU has finished it (so that the step can be timed)."""
    loss = trainer.step(batch)
    if trainer.device.type == "cuda":
        import torch

        torch.cuda.synchronize(trainer.device)
    return loss
