import numpy as np
import pytest

import xdex.text.cache as cache_module
from xdex.text import TokenCache, Tokenizer, default_cache_dir
from xdex.text.cache import texts_digest

CORPUS = ["the cat sat on the mat", "a dog ate the hat", "", "cats and dogs sit", "hats mats bats rats"]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train_wordpiece(CORPUS * 2, 60)


def count_encodes(monkeypatch, tokenizer):
    calls = []
    original = tokenizer.encode_batch
    monkeypatch.setattr(tokenizer, "encode_batch", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_read_back_is_memory_mapped_and_equals_direct_tokenisation(tmp_path, tokenizer):
    tokens = TokenCache(tokenizer, 4, folder=tmp_path).get(CORPUS)
    assert isinstance(tokens.ids, np.memmap) and isinstance(tokens.offsets, np.memmap)
    direct = tokenizer.encode_batch(CORPUS, 4)
    assert [tokens.row(i).tolist() for i in range(len(CORPUS))] == [d.tolist() for d in direct]
    assert tokens.ids.dtype == np.int32 and tokens.offsets.dtype == np.int64


def test_cache_hit_does_not_retokenise(tmp_path, tokenizer, monkeypatch):
    calls = count_encodes(monkeypatch, tokenizer)
    first = TokenCache(tokenizer, 8, folder=tmp_path).get(CORPUS)
    assert len(calls) == 1
    second = TokenCache(tokenizer, 8, folder=tmp_path).get(CORPUS)  # a new cache object, same folder
    assert len(calls) == 1
    assert second.ids.tolist() == first.ids.tolist() and second.offsets.tolist() == first.offsets.tolist()


def test_key_changes_with_texts_tokenizer_length_and_specials(tmp_path, tokenizer):
    other = Tokenizer.train_wordpiece(CORPUS * 2, 50)
    key = TokenCache(tokenizer, 8, folder=tmp_path).key(CORPUS)
    assert TokenCache(tokenizer, 8, folder=tmp_path / "elsewhere").key(CORPUS) == key
    changed = [
        TokenCache(tokenizer, 8, folder=tmp_path).key(CORPUS[:-1] + ["hats mats bats"]),
        TokenCache(other, 8, folder=tmp_path).key(CORPUS),
        TokenCache(tokenizer, 9, folder=tmp_path).key(CORPUS),
        TokenCache(tokenizer, 8, special_tokens=True, folder=tmp_path).key(CORPUS),
    ]
    assert len({key, *changed}) == 5


def test_texts_digest_separates_texts():
    assert texts_digest(["ab", "c"]) != texts_digest(["a", "bc"])
    assert texts_digest(["a", ""]) != texts_digest(["a"])


def test_changed_input_makes_a_new_entry(tmp_path, tokenizer):
    cache = TokenCache(tokenizer, 8, folder=tmp_path)
    cache.get(CORPUS)
    cache.get(CORPUS[:2])
    TokenCache(tokenizer, 3, folder=tmp_path).get(CORPUS)
    assert len(list(tmp_path.glob("*.offsets.npy"))) == 3


def test_failed_write_leaves_no_partial_file(tmp_path, tokenizer, monkeypatch):
    def crash(f, array):
        f.write(b"\x93NUMPY partial")
        raise OSError("disk full")

    monkeypatch.setattr(cache_module.np, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        TokenCache(tokenizer, 8, folder=tmp_path).get(CORPUS)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    assert len(TokenCache(tokenizer, 8, folder=tmp_path).get(CORPUS)) == len(CORPUS)


def test_damaged_entry_is_rebuilt(tmp_path, tokenizer, caplog):
    cache = TokenCache(tokenizer, 8, folder=tmp_path)
    expected = cache.get(CORPUS).ids.tolist()
    ids_path, _ = cache.paths(cache.key(CORPUS))
    ids_path.write_bytes(ids_path.read_bytes()[:40])
    assert cache.get(CORPUS).ids.tolist() == expected
    assert "ignoring the unreadable token cache entry" in caplog.text


def test_default_folder_follows_environment(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("XDEX_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert TokenCache(tokenizer, 8).folder == tmp_path / "c" / "tokens"
    monkeypatch.delenv("XDEX_CACHE_DIR")
    assert default_cache_dir().parts[-2:] == (".cache", "xdex")
