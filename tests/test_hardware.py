"""xdex.hardware: the CPU probes, subnormal floats flushed to zero, the pools of threads and numba's threads."""

import threading

import numba
import pytest
import torch

from xdex.hardware import (
    cores,
    cpu_has_bf16,
    cpu_has_vnni,
    denormals_are_flushed,
    denormals_flushed,
    in_parts,
    numba_parallel_is_thread_safe,
    numba_threads,
    thread_pool,
)


def test_cpu_has_bf16_asks_torch_and_says_no_where_torch_cannot_tell(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_has_bf16() is True
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert cpu_has_bf16() is False
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert cpu_has_bf16() is True
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert cpu_has_bf16() is False


def test_cpu_has_vnni_asks_torch_and_says_no_where_torch_cannot_tell(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: True, raising=False)
    assert cpu_has_vnni() is True
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: False)
    assert cpu_has_vnni() is False
    monkeypatch.delattr(torch.cpu, "_is_vnni_supported")
    assert cpu_has_vnni() is False


needs_flush = pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU cannot flush subnormal floats")


@needs_flush
def test_subnormals_are_zero_inside_the_block_and_the_mode_is_restored_after():
    tiny = torch.tensor([1e-39, 3e-39, 1.0], dtype=torch.float32)  # two subnormal float32 numbers and a normal one
    assert not denormals_are_flushed() and (tiny * 2.0)[0].item() > 0
    with denormals_flushed():
        assert denormals_are_flushed()
        assert (tiny * 2.0).tolist() == [0.0, 0.0, 2.0]
        assert torch.softmax(torch.tensor([0.0, -95.0]), 0)[1].item() == 0.0  # exp(-95) is subnormal
    assert not denormals_are_flushed() and (tiny * 2.0)[0].item() > 0
    with pytest.raises(RuntimeError), denormals_flushed():
        raise RuntimeError("a failing block")
    assert not denormals_are_flushed()


@needs_flush
def test_a_mode_the_caller_set_is_kept():
    torch.set_flush_denormal(True)
    try:
        with denormals_flushed():
            pass
        assert denormals_are_flushed()
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize(("n", "parts"), [(10, 1), (10, 2), (10, 3), (2, 3), (0, 2)])
def test_in_parts_covers_every_row_once(n, parts):
    seen, lock = [], threading.Lock()

    def work(start, end):
        with lock:
            seen.append((start, end, threading.current_thread()))

    in_parts("test", work, n, parts)
    assert [row for start, end, _ in sorted(seen, key=lambda s: s[:2]) for row in range(start, end)] == list(range(n))
    assert len(seen) == max(parts, 1)
    on_caller = [thread is threading.current_thread() for *_, thread in seen]
    assert all(on_caller) if parts < 2 else not any(on_caller)


def test_an_error_in_a_part_reaches_the_caller():
    def work(start, end):
        if start:
            raise ValueError("part failed")

    with pytest.raises(ValueError, match="part failed"):
        in_parts("test", work, 10, 2)


def test_a_named_pool_is_kept_and_has_a_thread_per_core():
    assert thread_pool("test") is thread_pool("test") and thread_pool("test")._max_workers == cores()


def test_numba_threads_set_the_team_for_the_block_and_restore_it():
    before = numba.get_num_threads()
    with numba_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with numba_threads(10**6):  # never more than numba's pool
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    with pytest.raises(RuntimeError), numba_threads(1):
        raise RuntimeError("restored on the way out too")
    assert numba.get_num_threads() == before


def test_thread_safety_follows_numbas_threading_layer(monkeypatch):
    assert numba_parallel_is_thread_safe() == (numba.threading_layer() in ("omp", "tbb"))
    for layer, safe in (("omp", True), ("tbb", True), ("workqueue", False)):
        monkeypatch.setattr(numba, "threading_layer", lambda layer=layer: layer)
        assert numba_parallel_is_thread_safe.__wrapped__() is safe
