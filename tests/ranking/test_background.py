"""A lexical fit in a child process: the model an inline fit gives, errors that name the cause, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from xdex.data import load
from xdex.ranking import LexicalConfig, LexicalModel
from xdex.ranking.background import BackgroundFit

N = 1500  # training documents of the bundled dataset
CONFIG = LexicalConfig(classifier="napkinxc-plt", seed=0)  # seeded: two fits give the same files


@pytest.fixture(scope="module")
def demo():
    return load("demo")


def test_the_child_fits_the_model_an_inline_fit_gives(demo):
    texts, labels = demo.train.texts[:N], demo.train.labels[:N]
    background = BackgroundFit(CONFIG, texts, labels)
    inline = LexicalModel(CONFIG).fit(texts, labels)
    model = background.result()
    assert not background.folder.exists()
    assert model.config == CONFIG and model.blocks == inline.blocks and model.n_labels == inline.n_labels
    assert model._files == inline._files  # the classifier's files, byte for byte
    assert {k: v for k, v in model.training.items() if k != "seconds"} == \
        {k: v for k, v in inline.training.items() if k != "seconds"}
    probe = demo.test.texts[:50]
    for got, expected in zip(model.predict(probe, 5), inline.predict(probe, 5), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_failed_fit_raises_with_the_childs_message(demo):
    labels = demo.train.labels[:20].copy()
    labels.data[:] = 0  # no text has a label
    background = BackgroundFit(CONFIG, demo.train.texts[:20], labels)
    with pytest.raises(RuntimeError, match="no training text has both a label and a feature"):
        background.result()
    assert not background.folder.exists()


def test_cancel_stops_the_child_and_removes_its_folder(demo):
    background = BackgroundFit(CONFIG, demo.train.texts[:N], demo.train.labels[:N])
    background.cancel()
    assert background._process.poll() is not None
    assert not background.folder.exists()


def test_an_unclaimed_fit_is_stopped_when_dropped(demo):
    background = BackgroundFit(CONFIG, demo.train.texts[:N], demo.train.labels[:N])
    process, folder = background._process, background.folder
    del background
    assert process.poll() is not None and not folder.exists()


def test_the_child_ends_when_its_parent_dies():
    """A parent that starts a process watching it and then exits: the watcher is gone within a few seconds."""
    watcher = ("import sys, threading, time; from xdex.ranking.background import _exit_with_parent; "
               "threading.Thread(target=_exit_with_parent, args=(int(sys.argv[1]),), daemon=True).start(); "
               "time.sleep(60)")
    parent = ("import os, subprocess, sys; "
              f"p = subprocess.Popen([sys.executable, '-c', {watcher!r}, str(os.getpid())], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, flush=True)")
    pid = int(subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True,
                             timeout=60).stdout)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.2)
    assert not _running(pid)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, ended but not yet collected, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
