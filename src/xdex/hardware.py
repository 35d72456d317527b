"""What the CPU computes natively, asked of torch's own probes (shared by the encoders and the exact search), the
floating-point mode the training runs in, and the process's pools of threads, one per core, for compiled or C work
that leaves Python's lock (the lexical channel, the ranking stage, exact search of many queries, the int8 scan,
the bag encoder's large passes), and numba's own threads where a compiled loop is split at a finer grain than a
Python thread's hand-over allows (the int8 scan, which goes to the pool only where numba's threads are unsafe)."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numba
import torch


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX-512 BF16 or AMX), which make bf16 products faster than float32.

    Asks torch's own CPU probes (``torch.cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``); False
    where a torch release lacks them. ``torch.backends.cpu.get_cpu_capability()`` says ``AVX512`` with or
    without BF16, so it cannot tell.
    """
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def cpu_has_vnni() -> bool:
    """Whether this CPU has int8 dot-product instructions (AVX-512 or AVX VNNI), which make int8 products about four
    times as fast as float32 ones (torch's own probe, ``torch.cpu._is_vnni_supported``; False where a torch
    release lacks it)."""
    return bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)())


def resolve_device(name: str, setting: str = "device") -> torch.device:
    """The torch device a ``setting`` names: ``"auto"`` is CUDA where there is a device, else the CPU; CUDA
    without an index is the current device (a distributed rank's own GPU). A name torch does not know, or CUDA on
    a machine without it, is refused naming the setting."""
    try:
        device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)
    except (RuntimeError, TypeError):
        raise ValueError(f"{setting} is {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{setting} is {name!r} but no CUDA device is available")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


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


def cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


_POOLS: dict[str, tuple[ThreadPoolExecutor, int]] = {}
_POOLS_LOCK = threading.Lock()


def thread_pool(name: str) -> ThreadPoolExecutor:
    """The process's pool of ``name`` threads, one per core, started at first use and kept (a forked child starts
    its own). A task of one pool may wait on tasks of another, never of its own."""
    with _POOLS_LOCK:
        pool, pid = _POOLS.get(name, (None, 0))
        if pool is None or pid != os.getpid():
            pool = ThreadPoolExecutor(cores(), thread_name_prefix=f"xdex-{name}")
            _POOLS[name] = pool, os.getpid()
        return pool


def in_parts(pool: str, work: Callable[[int, int], object], n: int, parts: int) -> None:
    """``work(start, end)`` over ``parts`` consecutive ranges covering ``0 .. n - 1``, side by side on the threads
    of :func:`thread_pool` ``pool`` (on the calling thread when ``parts`` < 2); returns when every part is done."""
    if parts < 2:
        work(0, n)
        return
    ends = [n * part // parts for part in range(parts + 1)]
    done = [thread_pool(pool).submit(work, a, b) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    for future in done:
        future.result()


@numba.njit(cache=True, parallel=True)
def _start_numba_threads(parts: int) -> int:
    """A parallel loop that does nothing but start numba's threading layer."""
    done = 0
    for _ in numba.prange(parts):
        done += 1
    return done


_NUMBA_LAYER_LOCK = threading.Lock()


@functools.cache
def numba_parallel_is_thread_safe() -> bool:
    """Whether numba's parallel loops may be entered from several Python threads at once: under its OpenMP or TBB
    threading layer. Its fallback on a machine with neither, the workqueue, ends the process when two threads
    enter a parallel loop together, so callers split their work over :func:`in_parts` there instead (the layer
    is started under a lock, once)."""
    with _NUMBA_LAYER_LOCK:
        _start_numba_threads(1)
        return numba.threading_layer() in ("omp", "tbb")


@contextlib.contextmanager
def numba_threads(n: int) -> Iterator[None]:
    """Numba's parallel loops entered from this thread run on ``n`` threads (at most numba's pool) until the block
    ends: a team no larger than the parts of the work, where numba's pool is as large as the machine's CPUs (more
    than this process may use under an affinity mask)."""
    before, wanted = numba.get_num_threads(), max(1, min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    if wanted == before:
        yield
        return
    numba.set_num_threads(wanted)
    try:
        yield
    finally:
        numba.set_num_threads(before)
