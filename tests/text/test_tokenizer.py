import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.text import Tokenizer

CORPUS = [
    "the cat sat on the mat",
    "a dog ate the hat",
    "cats and dogs sit",
    "hats mats bats rats",
    "The Rat sat",
] * 3

# A hand-made BERT vocabulary: ids are line numbers.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "sat"]


def write_vocab(folder, lowercase=True):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
    return folder


def test_wordpiece_training_is_deterministic():
    # The raw trainer breaks ties by hash-map order (10 runs give 10 vocabularies on this corpus).
    first = Tokenizer.train_wordpiece(CORPUS, 60)
    vocab = [first.id_to_token(i) for i in range(first.vocab_size)]
    for _ in range(5):
        again = Tokenizer.train_wordpiece(CORPUS, 60)
        assert [again.id_to_token(i) for i in range(again.vocab_size)] == vocab
        assert again.fingerprint() == first.fingerprint()


def test_wordpiece_training_specials_and_lowercase():
    tok = Tokenizer.train_wordpiece(CORPUS, 60)
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.pad_id == 0
    assert tok.vocab_size <= 60
    (ids,) = tok.encode_batch(["The CAT"], max_length=16)
    assert [tok.id_to_token(i) for i in ids] == ["the", "cat"]


def test_wordpiece_sample_uses_seed():
    a = Tokenizer.train_wordpiece(CORPUS, 60, seed=3, max_texts=6)
    b = Tokenizer.train_wordpiece(CORPUS, 60, seed=3, max_texts=6)
    assert a.fingerprint() == b.fingerprint()


def test_encode_with_and_without_special_tokens(tmp_path):
    tok = Tokenizer.from_pretrained_dir(write_vocab(tmp_path))
    plain, with_specials = tok.encode_batch(["The cats sat"], 16), tok.encode_batch(["The cats sat"], 16, True)
    assert plain[0].tolist() == [5, 6, 7, 8]
    assert with_specials[0].tolist() == [2, 5, 6, 7, 8, 3]
    assert plain[0].dtype == np.int32


def test_truncation_keeps_special_tokens(tmp_path):
    tok = Tokenizer.from_pretrained_dir(write_vocab(tmp_path))
    assert tok.encode_batch(["The cats sat"], 3)[0].tolist() == [5, 6, 7]
    assert tok.encode_batch(["The cats sat"], 4, special_tokens=True)[0].tolist() == [2, 5, 6, 3]
    # truncation does not stick to the tokenizer
    assert tok.encode_batch(["The cats sat"], 16)[0].tolist() == [5, 6, 7, 8]


def test_vocab_txt_respects_do_lower_case(tmp_path):
    tok = Tokenizer.from_pretrained_dir(write_vocab(tmp_path, lowercase=False))
    assert tok.encode_batch(["The cat"], 8)[0].tolist() == [1, 6]  # "The" is unknown when case is kept


def test_save_load_round_trip(tmp_path):
    tok = Tokenizer.train_wordpiece(CORPUS, 60)
    tok.save(tmp_path / "tok")
    back = Tokenizer.load(tmp_path / "tok")
    assert back.fingerprint() == tok.fingerprint()
    assert back.pad_id == tok.pad_id and back.vocab_size == tok.vocab_size
    for a, b in zip(tok.encode_batch(CORPUS, 8, True), back.encode_batch(CORPUS, 8, True), strict=False):
        assert a.tolist() == b.tolist()
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]


def test_fingerprint_tracks_vocabulary_and_pipeline():
    base = Tokenizer.train_wordpiece(CORPUS, 60)
    assert Tokenizer.train_wordpiece(CORPUS, 50).fingerprint() != base.fingerprint()
    assert Tokenizer.train_wordpiece(CORPUS, 60, lowercase=False).fingerprint() != base.fingerprint()


def test_hugging_face_padding_and_truncation_settings_are_dropped(tmp_path):
    Tokenizer.from_pretrained_dir(write_vocab(tmp_path)).save(tmp_path / "saved")
    backend = tokenizers.Tokenizer.from_file(str(tmp_path / "saved" / "tokenizer.json"))
    backend.enable_padding(pad_id=4, pad_token="[MASK]", length=10)
    backend.enable_truncation(2)
    folder = tmp_path / "hf"
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    tok = Tokenizer.from_pretrained_dir(folder)
    assert tok.pad_id == 4  # named by the padding settings
    assert tok.encode_batch(["the cats sat"], 16)[0].tolist() == [5, 6, 7, 8]


def test_pad_token_from_config_dict(tmp_path):
    folder = write_vocab(tmp_path)
    (folder / "tokenizer_config.json").write_text(json.dumps({"pad_token": {"content": "[MASK]"}}))
    assert Tokenizer.from_pretrained_dir(folder).pad_id == 4


def test_bad_inputs_give_clear_errors(tmp_path):
    tok = Tokenizer.from_pretrained_dir(write_vocab(tmp_path / "ok"))
    with pytest.raises(ValueError, match="text 1 is NoneType"):
        tok.encode_batch(["a", None], 8)
    with pytest.raises(ValueError, match="single string"):
        tok.encode_batch("abc", 8)
    with pytest.raises(ValueError, match="max_length must be at least 3"):
        tok.encode_batch(["a"], 2, special_tokens=True)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        Tokenizer.from_pretrained_dir(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json or vocab.txt"):
        Tokenizer.from_pretrained_dir(tmp_path / "empty")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken/tokenizer.json: cannot read the tokenizer"):
        Tokenizer.from_pretrained_dir(broken)
    (broken / "tokenizer_config.json").write_text('{\n  "pad_token": }')
    with pytest.raises(ValueError, match="tokenizer_config.json:2: invalid JSON"):
        Tokenizer.from_pretrained_dir(broken)


# -- long ASCII texts cleaned as BertNormalizer cleans them and cut to the words their ids come from -------------
ASCII_CORPUS = CORPUS + ["Tabs\tand\nnew lines\r here", "punct-uation: (a), [b]; {c}!", "x\x00y\x0bz\x0c\x7f end",
                         "caf\u00e9 na\u00efve", "\u4e2d\u6587 words", "[CLS] literal [sep] [MASK]"]


def _full_pipeline(tok: Tokenizer, texts: list[str], max_length: int, special_tokens: bool) -> list[list[int]]:
    """The ids of the tokenizer's own pipeline, normaliser included, without the shortcut."""
    backend = tokenizers.Tokenizer.from_str(tok._backend.to_str())
    backend.enable_truncation(max_length)
    return [e.ids for e in backend.encode_batch(texts, add_special_tokens=special_tokens)]


TRAINED = Tokenizer.train_wordpiece(ASCII_CORPUS * 2, 120)


def test_every_ascii_character_gets_the_ids_of_the_whole_pipeline(tmp_path):
    for tok in (TRAINED, Tokenizer.from_pretrained_dir(write_vocab(tmp_path)),
                Tokenizer.from_pretrained_dir(write_vocab(tmp_path / "cased", lowercase=False))):
        assert tok._ascii is not None  # both are BertNormalizer pipelines
        texts = [f"The {chr(c)}cat{chr(c)} sat{chr(c)} on {chr(c)} the mat" for c in range(128)]
        assert len(tok._ascii.takes(texts, 4)) == 128  # every one of them is cut
        texts += [chr(c) for c in range(128)]  # and these, too short to cut, take the whole pipeline
        for max_length in (4, 16):
            for special_tokens in (False, True):
                got = [ids.tolist() for ids in tok.encode_batch(texts, max_length, special_tokens)]
                assert got == _full_pipeline(tok, texts, max_length, special_tokens)


def test_ascii_and_other_texts_mixed_keep_their_rows():
    texts = ASCII_CORPUS[::-1] + ASCII_CORPUS
    assert 0 < len(TRAINED._ascii.takes(texts, 4)) < len(texts)  # both paths are taken
    got = [ids.tolist() for ids in TRAINED.encode_batch(texts, 4)]
    assert got == _full_pipeline(TRAINED, texts, 4, False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40)
                | st.lists(st.sampled_from(["[CLS]", "[UNK]", "Cat", "\u00e9", " ", "\t", "s", "."]), max_size=8)
                .map("".join), max_size=6))
def test_random_ascii_texts_get_the_ids_of_the_whole_pipeline(texts):
    tok = TRAINED
    assert [ids.tolist() for ids in tok.encode_batch(texts, 5)] == _full_pipeline(tok, texts, 5, False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["cat", "The", "sat.", "mats,", "x\x01", "\x02", "(a)", "\t", "  ", "\n\r", "dogs"]),
                min_size=0, max_size=60).map(" ".join),
       st.integers(min_value=3, max_value=12), st.booleans())
def test_a_long_text_cut_to_its_first_words_gets_the_ids_of_the_whole_text(text, max_length, special_tokens):
    tok = TRAINED
    got = tok.encode_batch([text, text.upper()], max_length, special_tokens)
    assert [ids.tolist() for ids in got] == _full_pipeline(tok, [text, text.upper()], max_length, special_tokens)


def test_a_long_text_is_cut_before_the_library_reads_it():
    text = " ".join(["The cat sat on the mat"] * 500)
    assert len(TRAINED._ascii.normalize(text, 8).split()) == 8
    assert TRAINED.encode_batch([text], 8)[0].tolist() == _full_pipeline(TRAINED, [text], 8, False)[0]


def test_a_tokenizer_with_another_normalizer_takes_no_shortcut():
    backend = tokenizers.Tokenizer(tokenizers.models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    backend.normalizer = tokenizers.normalizers.Lowercase()
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = Tokenizer(backend)
    assert tok._ascii is None and tok.encode_batch(["A a"], 4)[0].tolist() == [1, 1]
    backend.normalizer = tokenizers.normalizers.BertNormalizer(clean_text=False)
    assert Tokenizer(backend)._ascii is None  # without the cleaning, a word of control characters may give no id
    backend.normalizer = tokenizers.normalizers.BertNormalizer()
    assert Tokenizer(backend)._ascii is not None
    backend.add_tokens([tokenizers.AddedToken("[Mark]", normalized=True)])  # matched in the normalised text
    assert Tokenizer(backend)._ascii is None


# -- ASCII texts' ids word by word, each word's ids remembered (BERT's pre-tokenizer, no special tokens) -------------
def test_short_ascii_texts_take_the_word_ids_where_the_pre_tokenizer_is_berts(tmp_path):
    for tok in (TRAINED, Tokenizer.from_pretrained_dir(write_vocab(tmp_path))):
        assert tok._ascii.words is not None
        texts = ["The cat", "cats!", "a", ""]
        assert tok._ascii.takes(texts, 32) == [0, 1, 2, 3]  # every length, without special tokens
        assert tok._ascii.takes(texts, 32, special_tokens=True) == []  # with them, only texts long enough to cut
        assert [ids.tolist() for ids in tok.encode_batch(texts, 32)] == _full_pipeline(tok, texts, 32, False)


def test_another_pre_tokenizer_takes_no_word_ids():
    vocab = {"[UNK]": 0, "a": 1, "b": 2, "##b": 3}
    backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = tokenizers.normalizers.BertNormalizer()
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()  # punctuation stays inside words
    tok = Tokenizer(backend)
    assert tok._ascii is not None and tok._ascii.words is None
    texts = ["a.b a b", "ab " * 20]
    assert [ids.tolist() for ids in tok.encode_batch(texts, 8)] == _full_pipeline(tok, texts, 8, False)


def test_a_word_split_across_ids_is_cut_at_max_length():
    text = "cats " + "hatsmatsbats " * 3
    for max_length in range(1, 12):
        assert TRAINED.encode_batch([text], max_length)[0].tolist() == _full_pipeline(TRAINED, [text], max_length,
                                                                                      False)[0]


def test_the_remembered_words_start_afresh_past_their_limit(monkeypatch):
    tok = Tokenizer.train_wordpiece(ASCII_CORPUS * 2, 120)
    words = tok._ascii.words
    monkeypatch.setattr(words, "MAX_WORDS", 5)
    for texts in (["the cat sat on the mat", "a dog"], ["the cat sat on the mat", "a dog"], ["cats, and dogs"]):
        assert [ids.tolist() for ids in tok.encode_batch(texts, 16)] == _full_pipeline(tok, texts, 16, False)
        assert sorted(words._ids) == sorted(set(" ".join(texts).replace(",", " ,").split()))  # this batch's alone


def test_threads_tokenizing_at_once_get_their_own_texts_ids(monkeypatch):
    tok = Tokenizer.train_wordpiece(ASCII_CORPUS * 2, 120)
    monkeypatch.setattr(tok._ascii.words, "MAX_WORDS", 8)  # so that the memory starts afresh while others read it
    rng = np.random.default_rng(0)
    words = ["cat", "sat", "mat", "dog", "hat", "the", "rats", "x", "(a)", "bats", "dogs,", "on"]
    batches = [[" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(20)] for _ in range(16)]
    expected = [_full_pipeline(tok, batch, 6, False) for batch in batches]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda batch: [ids.tolist() for ids in tok.encode_batch(batch, 6)], batches * 4))
    assert got == expected * 4
