"""How many intra-op threads each kind of work gets, so that users need not set ``OMP_NUM_THREADS``.

A bag-of-embeddings training step works on a few hundred rows of a few hundred floats: on a small machine one
thread runs it as fast as two when the machine is idle, and many times faster when it is busy, because OpenMP
threads that wait for a busy core cost more than the work they share (docs/benchmarks.md, "Encoders": 2.6-13 s
against 4.4-144 s an epoch). Embedding passes (refreshes, validation, label vectors) multiply large matrices and
keep torch's default, every core. Where the user chose (``OMP_NUM_THREADS`` set), their choice stands.

A transformer's training step keeps torch's default too: it multiplies matrices of thousands of rows, and on 2
cores two threads ran all-MiniLM-L6-v2's step 1.7x faster than one on a quieter machine (docs/benchmarks.md,
"Transformer training step on the CPU"), and a larger machine has more cores to share them. Only where other
jobs keep the cores busy is one thread faster (there, two threads were 1.4-3x slower); such users set
``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.base import Encoder


def step_threads(encoder: Encoder, device: torch.device) -> int | None:
    """Intra-op threads for the training steps of a network on ``encoder``: one for a bag encoder on the CPU,
    None (torch's setting) otherwise, a transformer included, or when ``OMP_NUM_THREADS`` is set."""
    if "OMP_NUM_THREADS" in os.environ or device.type != "cpu" or not isinstance(encoder, BagOfEmbeddings):
        return None
    return 1


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
