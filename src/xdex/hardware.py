"""What the CPU computes natively, asked of torch's own probes (shared by the encoders and the exact search), and
the floating-point mode the training runs in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX-512 BF16 or AMX), which make bf16 products faster than float32.

    Asks torch's own CPU probes (``torch.cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``); False
    where a torch release lacks them. ``torch.backends.cpu.get_cpu_capability()`` says ``AVX512`` with or
    without BF16, so it cannot tell.
    """
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def denormals_are_flushed() -> bool:
    """Whether this thread's float arithmetic treats subnormal numbers as zero (x86 DAZ, what
    ``torch.set_flush_denormal(True)`` sets): a subnormal input then multiplies to zero. torch has no getter."""
    return bool((torch.tensor([1e-39], dtype=torch.float32) * 2.0).item() == 0.0)


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """Run the block with subnormal floats flushed to zero on the calling thread, then restore the mode.

    A softmax over a confident model's scores gives most labels probabilities below float32's smallest normal
    number (1.2e-38), and x86 processors compute with such subnormal numbers through slow microcode: on an Intel
    Xeon a softmax and product over 256 x 1,010 scores took 4.4 ms with them against 0.7 ms without, and the
    epochs of a training that memorises its labels grew from 9 to 19-25 s, against 9-11 s flushed
    (docs/benchmarks.md, "Subnormal floats in the training steps"). Flushed, they count as zero, which they are
    to every loss and gradient here. Where the processor cannot flush them (``torch.set_flush_denormal`` says
    so), nothing changes. The mode is the calling thread's, and threads started later inherit it: it covers a bag
    encoder's training steps, which run on the calling thread (one intra-op thread), and numba's kernels called
    from it. An OpenMP pool that torch started earlier keeps its own mode, so a transformer's steps on several
    threads are flushed only in part.
    """
    before = denormals_are_flushed()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)
