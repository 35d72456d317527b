"""Progress bars only on a terminal: with stderr redirected (a log file, a pipe, CI) training writes one log
line per epoch and no progress frames; on a terminal the bar is drawn."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import threading

import pytest

# a tiny run (DEXML's memorisation task, a small bag encoder, two epochs, no classifier stage), logging as the
# CLI does; the trainer's progress setting is left at its default
TRAIN = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
from xdex.data.synthetic import memorisation_task
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
overrides = ["trainer.epochs=2", "trainer.eval_every=1", "data.validation_size=0", "encoder.dim=16",
             "encoder.vocab_size=300", "sampling.batch_size=16", "classifiers=null"]
train(memorisation_task(n=64, length=4, vocab_size=60, seed=1), load_recipe("ngame", overrides=overrides), sys.argv[1])
"""
FRAME = re.compile(r"\r|\d+batch/s|s/batch|\d+%\|")  # what a tqdm bar writes


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TERM": "dumb"}


def test_redirected_output_gets_one_line_per_epoch_and_no_frames(tmp_path):
    result = subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path / "model")], capture_output=True,
                            env=child_env(), timeout=300)
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert not FRAME.search(stderr) and not FRAME.search(result.stdout.decode())
    epochs = re.findall(r"^INFO xdex\.train\.trainer: epoch (\d+): \{.*\"loss\"", stderr, flags=re.MULTILINE)
    assert epochs == ["1", "2"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="no pseudo-terminal")
def test_a_terminal_gets_the_progress_bar(tmp_path):
    import fcntl
    import termios

    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new one has no width
    child = subprocess.Popen([sys.executable, "-c", TRAIN, str(tmp_path / "model")], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=secondary, env=child_env())
    os.close(secondary)
    chunks: list[bytes] = []

    def read() -> None:  # the terminal's buffer is small: read it while the child writes
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert child.wait(timeout=300) == 0
    finally:
        reader.join(timeout=10)
        os.close(primary)
    shown = b"".join(chunks).decode(errors="replace")
    assert re.search(r"\repoch 1/2: +\d+%\|", shown), shown  # tqdm's bar, drawn over itself
    assert re.search(r"\repoch 2/2: +\d+%\|", shown), shown
    assert re.findall(r"xdex\.train\.trainer: epoch (\d+): \{", shown) == ["1", "2"]
