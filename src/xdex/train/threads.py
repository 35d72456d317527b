"""How many intra-op threads each kind of work gets, so that users need not set ``OMP_NUM_THREADS``.

A bag-of-embeddings training step works on a few hundred rows of a few hundred floats. When the machine is busy,
one thread runs it many times faster than two, because OpenMP threads that wait for a busy core cost more than
the work they share (docs/benchmarks.md, "Encoders": 2.6-13 s against 4.4-144 s an epoch). When it is idle, the
larger steps (UniDEC's label pools at 10^5 labels) run faster on every core: 36-39 against 44-55 ms a step on 2
cores (docs/benchmarks.md, "Training steps on one thread or every core"). So :class:`StepThreads` times the
steps themselves: each epoch that is due for a look starts with a few steps on one thread and a few on every
core, alternately, and runs the rest of the epoch on the faster count. A step's result does not depend on the
count (a test compares the weights after steps on one and on two threads, bit for bit), so the choice changes
the time only. Embedding passes (refreshes, validation, label vectors) multiply large matrices and keep torch's
default, every core. Where the user chose (``OMP_NUM_THREADS`` set), their choice stands.

A transformer's training step keeps torch's default too: it multiplies matrices of thousands of rows, and on 2
cores two threads ran all-MiniLM-L6-v2's step 1.7x faster than one on a quieter machine (docs/benchmarks.md,
"Transformer training step on the CPU"), and a larger machine has more cores to share them. Only where other
jobs keep the cores busy is one thread faster (there, two threads were 1.4-3x slower); such users set
``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
from collections.abc import Iterator

import torch

from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.base import Encoder
from xdex.hardware import cores

log = logging.getLogger(__name__)


def step_threads(encoder: Encoder, device: torch.device) -> int | None:
    """Intra-op threads for the training steps of a network on ``encoder``: one for a bag encoder on the CPU,
    None (torch's setting) otherwise, a transformer included, or when ``OMP_NUM_THREADS`` is set."""
    if "OMP_NUM_THREADS" in os.environ or device.type != "cpu" or not isinstance(encoder, BagOfEmbeddings):
        return None
    return 1


def training_step_threads(encoder: Encoder, device: torch.device, distributed: bool) -> int | StepThreads | None:
    """What the trainer runs its steps on: :func:`step_threads`, except that a bag encoder trained by one process
    on a CPU of several cores has its count chosen by timing (:class:`StepThreads`). Processes of a torchrun share
    the machine's cores, so each keeps one thread."""
    threads = step_threads(encoder, device)
    if threads == 1 and not distributed and cores() > 1:
        return StepThreads(cores())
    return threads


class StepThreads:
    """The intra-op thread count of an epoch's training steps, one or ``most``, chosen by timing the steps.

    An epoch that is due for a look runs ``WARMUP`` steps on one thread, then ``ROUNDS`` rounds of ``PROBE``
    steps on one thread and ``PROBE`` on ``most``, and the rest of the epoch on the count whose median step was
    faster; ``most`` must be faster by ``MARGIN`` to be chosen, since one thread is the safer count when other
    work comes. Every epoch looks again (the load may have changed), at the cost of a few steps on the slower
    count. A step on ``most`` threads that takes ``GIVE_UP`` times the look's median on one thread, in the look
    or later in the epoch, puts the rest of the epoch on one thread at once (another job holds a core: such
    steps can be many times slower), and the next look is then twice as many epochs away as the last (1, 2, 4,
    ...), so a machine that stays that busy pays for few of them. Epochs of fewer than ``MIN_STEPS`` steps run on
    one thread without a look."""

    WARMUP = 2
    PROBE = 3
    ROUNDS = 2
    MARGIN = 0.9
    GIVE_UP = 3.0
    MIN_STEPS = 60

    def __init__(self, most: int) -> None:
        if most < 2:
            raise ValueError(f"StepThreads needs at least 2 threads to choose from, got {most}")
        self.most = most
        self.chosen = 1
        self._epoch = 0
        self._next_look = 0  # the first epoch at or after which a look is due
        self._gave_up = 0  # looks in a row that ended early
        self._plan: list[int] = []  # the thread count of each step of the current look
        self._times: dict[int, list[float]] = {}
        self._one_thread_median: float | None = None  # of the last look, while ``most`` is chosen

    def start_epoch(self, epoch: int, steps: int) -> None:
        """Begin ``epoch`` of ``steps`` steps: plan a look if one is due."""
        self._epoch, self._plan, self._times = epoch, [], {1: [], self.most: []}
        if epoch >= self._next_look and steps >= self.MIN_STEPS:
            self._plan = [1] * self.WARMUP + ([1] * self.PROBE + [self.most] * self.PROBE) * self.ROUNDS

    def threads(self, step: int) -> int:
        """The thread count of the epoch's step ``step`` (from 0)."""
        return self._plan[step] if step < len(self._plan) else self.chosen

    def record(self, step: int, threads: int, seconds: float) -> None:
        """Note how long step ``step`` took on ``threads`` threads; the look's last step makes the choice."""
        looking = step < len(self._plan)
        if looking and step >= self.WARMUP:
            self._times[threads].append(seconds)
        one = statistics.median(self._times[1]) if looking and self._times[1] else self._one_thread_median
        if threads == self.most and one is not None and seconds > self.GIVE_UP * one:
            self._choose(1, f"a step on {threads} threads took {seconds * 1e3:.0f} ms against {one * 1e3:.0f} ms "
                            "on one", gave_up=True)
        elif step == len(self._plan) - 1:
            medians = {n: statistics.median(t) for n, t in self._times.items()}
            faster = medians[self.most] < self.MARGIN * medians[1]
            self._choose(self.most if faster else 1, ", ".join(f"{n} thread(s): median {m * 1e3:.1f} ms"
                                                               for n, m in medians.items()), gave_up=False)

    def _choose(self, threads: int, reason: str, gave_up: bool) -> None:
        self._one_thread_median = statistics.median(self._times[1]) if threads > 1 else None
        self._plan = []
        self.chosen = threads
        self._gave_up = self._gave_up + 1 if gave_up else 0
        self._next_look = self._epoch + 2 ** max(self._gave_up - 1, 0)
        log.debug("training steps on %d thread(s): %s", threads, reason)


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads (None: unchanged), then restore the count."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
