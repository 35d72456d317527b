"""A lexical model fitted in a process of its own while the caller goes on: the ranking stage's refit runs beside
the network's training (:mod:`xdex.methods.ranker`).

Why a process and not a thread: the fit's TF-IDF transform is Python, so on a thread it would compete for Python's
lock with the training loop; and the classifier library's output is moved to the log through the process's file
descriptors (:func:`xdex.ranking.lexical._library_output_to_log`), which a thread would move for the whole
process. Why ``python -m`` and not :mod:`multiprocessing`: a spawned child imports the caller's main script again,
which runs a user's script that trains at its top level (no ``if __name__ == "__main__"``) a second time.

The inputs go to a temporary folder as JSON and ``.npz`` (no pickle), the child fits, saves the model there and
exits; the caller loads it when it needs it, then removes the folder. The child ends itself if its parent dies, so
a killed training leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import scipy.sparse as sp

from xdex.jsonfile import read_json, write_json
from xdex.ranking.lexical import LexicalConfig, LexicalModel

CONFIG, TEXTS, LABELS, ERRORS, MODEL_DIR = "config.json", "texts.json", "labels.npz", "stderr.txt", "model"
PARENT_CHECK_S = 1.0  # how often the child looks whether its parent is still there
NICE = 10  # the child's scheduling priority, below the caller's


class BackgroundFit:
    """``LexicalModel(config).fit(texts, labels)`` in a child process, started at construction.

    The child runs at a lower scheduling priority than the caller (``NICE``): its classifier trains on the threads
    ``config`` gives it, which take the cores the caller leaves idle and, once the caller waits, all of them. The
    model is the one an inline fit gives (napkinXC's seeded fits: the same files). :meth:`result` waits for it;
    :meth:`cancel` stops the child.
    """

    def __init__(self, config: LexicalConfig, texts: Sequence[str], labels: sp.csr_matrix | sp.csr_array) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="xdex-lexical-fit-"))  # not the user's folder
        try:
            write_json(self.folder / CONFIG, config.to_dict())
            write_json(self.folder / TEXTS, list(texts))
            sp.save_npz(self.folder / LABELS, sp.csr_matrix(labels))
            package_root = str(Path(__file__).resolve().parents[2])  # where `xdex` is imported from here
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root,
                                                                             os.environ.get("PYTHONPATH")]))}
            with open(self.folder / ERRORS, "wb") as errors:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(self.folder), str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        # a fit nobody waits for (the training failed, the interpreter exits) is stopped and its folder removed
        self._finalizer = weakref.finalize(self, _stop, self._process, self.folder)

    def result(self) -> LexicalModel:
        """Wait for the child; its model, or ``RuntimeError`` with the last line the child wrote to stderr."""
        self._finalizer.detach()
        try:
            code = self._process.wait()
            if code != 0:
                lines = (self.folder / ERRORS).read_text("utf-8", "replace").strip().splitlines()
                raise RuntimeError(f"the lexical fit in a background process failed (exit code {code}): "
                                   f"{lines[-1] if lines else 'no message'}")
            return LexicalModel.load(self.folder / MODEL_DIR)
        finally:  # also when the wait is interrupted
            _stop(self._process, self.folder)

    def cancel(self) -> None:
        """Stop the child if it still runs, and remove its folder."""
        self._finalizer()


def _stop(process: subprocess.Popen, folder: Path) -> None:
    """End ``process`` if it still runs and remove ``folder``."""
    if process.poll() is None:
        process.terminate()
        process.wait()
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str]) -> None:
    """The child: ``FOLDER PARENT_PID``; fits the model of the folder's inputs and saves it there."""
    folder, parent = Path(argv[0]), int(argv[1])
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    with contextlib.suppress(AttributeError, OSError):  # where the system has no nice value, none is set
        os.nice(NICE)  # the caller's work (the training) is the run's critical path: a shared core goes to it first
    config = LexicalConfig.from_dict(read_json(folder / CONFIG))
    model = LexicalModel(config).fit(read_json(folder / TEXTS), sp.csr_matrix(sp.load_npz(folder / LABELS)))
    model.save(folder / MODEL_DIR)


def _exit_with_parent(parent: int) -> None:
    """End this process once ``parent`` is gone (an orphan is handed to another process)."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = ["BackgroundFit"]
