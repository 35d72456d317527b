"""Sub-word tokenisation: a thin wrapper over the Hugging Face ``tokenizers`` library.

A :class:`Tokenizer` is either trained offline on the texts of a dataset (a BERT-style WordPiece
vocabulary, :meth:`Tokenizer.train_wordpiece`) or read from a local Hugging Face model folder
(:meth:`Tokenizer.from_pretrained_dir`). Bag-of-embeddings encoders read ids without special
tokens; transformers read them with ``[CLS] ... [SEP]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from xdex.atomic import atomic_path
from xdex.jsonfile import read_json, write_json
from xdex.text.tokens import TokenizedTexts

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
VOCAB_FILE = "vocab.txt"
_PAD_CANDIDATES = ("[PAD]", "<pad>")


class Tokenizer:
    """Text to token ids. ``pad_token`` names the token that fills padded positions (id 0 if unknown)."""

    def __init__(self, backend: tokenizers.Tokenizer, pad_token: str | None = None):
        backend.no_padding()
        backend.no_truncation()
        self._backend = backend
        self._truncating: dict[int, tuple[tokenizers.Tokenizer, tokenizers.Tokenizer | None]] = {}  # by max_length
        self._ascii = _AsciiShortcut.of(backend)
        if pad_token is not None and backend.token_to_id(pad_token) is None:
            raise ValueError(f"pad token {pad_token!r} is not in the vocabulary")
        self.pad_token = pad_token
        canonical = backend.to_str() + "\npad=" + str(pad_token)
        self._fingerprint = hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    # ------------------------------------------------------------------ construction

    @classmethod
    def train_wordpiece(
        cls,
        texts: Sequence[str],
        vocab_size: int = 30_000,
        *,
        lowercase: bool = True,
        seed: int = 0,
        max_texts: int | None = 1_000_000,
    ) -> Tokenizer:
        """Train a BERT-style WordPiece vocabulary on ``texts`` (e.g. training texts and label texts).

        Training is deterministic: every continuation piece ``##c`` of the corpus alphabet gets its id
        before training starts, so ties between equally frequent merges break the same way in every
        run. When more than ``max_texts`` texts are given, a sample of that size drawn with ``seed``
        is used.
        """
        _check_texts(texts)
        if vocab_size < len(SPECIAL_TOKENS) + 1:
            raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 1}, got {vocab_size}")
        if max_texts is not None and len(texts) > max_texts:
            keep = np.sort(np.random.default_rng(seed).choice(len(texts), max_texts, replace=False))
            texts = [texts[i] for i in keep]
        start = time.perf_counter()
        normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        alphabet = _alphabet(texts, normalizer)
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS) + [f"##{c}" for c in alphabet],
            show_progress=False,
        )
        draft = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        draft.normalizer = normalizer
        draft.pre_tokenizer = pre_tokenizer
        draft.train_from_iterator(texts, trainer, length=len(texts))

        # Rebuild so that only the real special tokens are "added" (special) tokens.
        vocab = draft.get_vocab(with_added_tokens=True)
        backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        backend.normalizer = normalizer
        backend.pre_tokenizer = pre_tokenizer
        backend.decoder = decoders.WordPiece()
        backend.post_processor = processors.BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
        backend.add_special_tokens(list(SPECIAL_TOKENS))
        logger.info(
            "trained a WordPiece vocabulary of %d tokens on %d texts in %.1f s",
            backend.get_vocab_size(),
            len(texts),
            time.perf_counter() - start,
        )
        return cls(backend, pad_token="[PAD]")

    @classmethod
    def from_pretrained_dir(cls, path: str | Path) -> Tokenizer:
        """Read the tokenizer of a local Hugging Face model folder (``tokenizer.json``, else ``vocab.txt``)."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: not a folder")
        config = read_json(path / CONFIG_FILE) if (path / CONFIG_FILE).is_file() else {}
        if (path / TOKENIZER_FILE).is_file():
            try:
                backend = tokenizers.Tokenizer.from_file(str(path / TOKENIZER_FILE))
            except Exception as e:  # the Rust library raises a bare Exception
                raise ValueError(f"{path / TOKENIZER_FILE}: cannot read the tokenizer ({e})") from None
        elif (path / VOCAB_FILE).is_file():
            backend = _bert_from_vocab(path / VOCAB_FILE, lowercase=bool(config.get("do_lower_case", True)))
        else:
            raise FileNotFoundError(f"{path}: no {TOKENIZER_FILE} or {VOCAB_FILE}; not a tokenizer folder")
        return cls(backend, pad_token=_find_pad_token(backend, config))

    @classmethod
    def load(cls, folder: str | Path) -> Tokenizer:
        """Read a tokenizer written by :meth:`save` (or any Hugging Face tokenizer folder)."""
        return cls.from_pretrained_dir(folder)

    def save(self, folder: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` (readable by Hugging Face too), atomically."""
        folder = Path(folder)
        with atomic_path(folder / TOKENIZER_FILE) as tmp:
            self._backend.save(str(tmp))
        config = {"pad_token": self.pad_token} if self.pad_token is not None else {}
        write_json(folder / CONFIG_FILE, config)

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        """Number of token ids, special tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        """Id used for padded positions (masked out by the attention mask)."""
        if self.pad_token is None:
            return 0
        pad = self._backend.token_to_id(self.pad_token)
        assert pad is not None  # checked in __init__
        return pad

    def fingerprint(self) -> str:
        """SHA-256 of the vocabulary and the whole tokenisation pipeline; stable across runs and machines."""
        return self._fingerprint

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    # ------------------------------------------------------------------ encoding

    def encode_batch(self, texts: Sequence[str], max_length: int, special_tokens: bool = False) -> list[np.ndarray]:
        """Token ids of each text (int32), truncated to ``max_length`` ids, special tokens included."""
        _check_texts(texts)
        n_special = self._backend.num_special_tokens_to_add(False) if special_tokens else 0
        if max_length < n_special + 1:
            raise ValueError(f"max_length must be at least {n_special + 1}, got {max_length}")
        backends = self._truncating.get(max_length)
        if backends is None:
            backends = self._truncating[max_length] = (
                _truncating(self._backend.to_str(), max_length),
                None if self._ascii is None else _truncating(self._ascii.unnormalized, max_length))
        backend, unnormalized = backends
        texts = list(texts)
        shortcut = self._ascii
        rows = [] if shortcut is None or unnormalized is None else shortcut.takes(texts, max_length, special_tokens)
        if not rows:
            return _id_arrays(backend.encode_batch_fast(texts, add_special_tokens=special_tokens))
        assert shortcut is not None and unnormalized is not None  # rows are taken by the shortcut alone
        cut = [shortcut.normalize(texts[i], max_length) for i in rows]  # normalised and cut by the shortcut
        if shortcut.words is not None and not special_tokens:
            taken = shortcut.words.ids(cut, max_length)
        else:
            taken = _id_arrays(unnormalized.encode_batch_fast(cut, add_special_tokens=special_tokens))
        if len(rows) == len(texts):
            return taken
        others = sorted(set(range(len(texts))).difference(rows))  # the others by the whole pipeline
        rest = _id_arrays(backend.encode_batch_fast([texts[i] for i in others], add_special_tokens=special_tokens))
        by_row = dict(zip(rows, taken, strict=True)) | dict(zip(others, rest, strict=True))
        return [by_row[i] for i in range(len(texts))]

    def tokenize(
        self, texts: Sequence[str], max_length: int, special_tokens: bool = False, chunk_size: int = 8192
    ) -> TokenizedTexts:
        """Token ids of all texts in the flat layout of :class:`TokenizedTexts` (tokenised in chunks)."""
        parts = [
            TokenizedTexts.from_arrays(self.encode_batch(texts[i : i + chunk_size], max_length, special_tokens))
            for i in range(0, len(texts), chunk_size)
        ]
        return TokenizedTexts.concatenate(parts)


def _id_arrays(encodings: list[tokenizers.Encoding]) -> list[np.ndarray]:
    """Each encoding's ids as an int32 array."""
    return [np.asarray(e.ids, dtype=np.int32) for e in encodings]


def _truncating(spec: str, max_length: int) -> tokenizers.Tokenizer:
    """The tokenizer of the JSON ``spec``, truncating to ``max_length`` ids."""
    backend = tokenizers.Tokenizer.from_str(spec)
    backend.enable_truncation(max_length)
    return backend


# BertNormalizer's text cleaning on ASCII: control characters removed, tab, newline and carriage return made spaces
_ASCII_CLEANING = {**dict.fromkeys([*range(32), 127]), **{ord(c): " " for c in "\t\n\r"}}


class _AsciiShortcut:
    """ASCII texts normalised in Python and cut to the words that their ``max_length`` ids come from, for a
    tokenizer whose normaliser is BertNormalizer; with BERT's pre-tokenizer, their words' ids remembered too.

    The library normalises and splits a whole text before it truncates the ids: a description of hundreds of words
    was read through for 128 ids. Here an ASCII text is cleaned as BertNormalizer cleans it (on ASCII it only removes
    control characters, turns tab, newline and carriage return into spaces and lowercases: there are no accents or
    Chinese characters to treat), by Python's string methods; after the cleaning every word (a run of characters
    between spaces) gives at least one id, so the first ``max_length`` words give all the ids kept, and the
    pipeline without its normaliser reads those alone. Tokenizing long documents took 24-40% less time
    (docs/benchmarks.md, "Tokenizing for prediction"). Texts with a character beyond ASCII or an added token
    (``[CLS]``, matched before normalising) take the whole pipeline.

    Where the pre-tokenizer is BERT's and no special tokens are asked for (the bag encoders), a text's ids are those
    of its words one after the other (:class:`_WordPieces`), so every ASCII text takes the shortcut. Otherwise only
    texts long enough to be cut (``2 * max_length`` characters or more) do. The ids are the whole pipeline's: tested
    over every ASCII character and on random texts."""

    def __init__(self, unnormalized: str, lowercase: bool, added: list[str], bert_words: bool):
        self.unnormalized = unnormalized  # the pipeline without its normaliser, as JSON
        self.lowercase, self.added = lowercase, added
        self.words = _WordPieces(unnormalized, lowercase) if bert_words else None

    @classmethod
    def of(cls, backend: tokenizers.Tokenizer) -> _AsciiShortcut | None:
        """The shortcut for ``backend``, or None where its normaliser is not a BertNormalizer that cleans texts
        (without the cleaning, a word of control characters may give no id) or an added token is matched in the
        normalised text (then a text may hold it in another case; BERT's special tokens are matched as written)."""
        spec = json.loads(backend.to_str())
        normalizer = spec.get("normalizer") or {}
        tokens = spec.get("added_tokens") or []
        if (normalizer.get("type") != "BertNormalizer" or not normalizer.get("clean_text", True)
                or any(token.get("normalized", True) for token in tokens)):
            return None
        added = [token["content"] for token in tokens]
        bert_words = (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
        return cls(json.dumps({**spec, "normalizer": None}), bool(normalizer.get("lowercase", True)), added,
                   bert_words)

    def takes(self, texts: list[str], max_length: int, special_tokens: bool = False) -> list[int]:
        """The rows of ``texts`` this shortcut takes: ASCII, no added token's text in them, and, unless their words'
        ids are remembered, at least ``2 * max_length`` characters (shorter texts cannot have enough words to be
        cut)."""
        added = self.added
        shortest = 0 if self.words is not None and not special_tokens else 2 * max_length
        return [i for i, text in enumerate(texts)
                if len(text) >= shortest and text.isascii() and not any(token in text for token in added)]

    def normalize(self, text: str, max_length: int) -> str:
        """What BertNormalizer makes of an ASCII ``text``, cut to its first ``max_length`` words."""
        text = text.translate(_ASCII_CLEANING)
        if self.lowercase:
            text = text.lower()
        words = text.split(None, max_length)  # after the cleaning, spaces alone separate words
        return " ".join(words[:max_length]) if len(words) > max_length else text


class _WordPieces:
    """The ids of normalised ASCII texts under BERT's pre-tokenizer, word by word, each word's ids asked of the
    library once and remembered.

    BERT's pre-tokenizer splits a normalised ASCII text at spaces and around each punctuation character (every
    printable ASCII character that is not a letter or a digit), and WordPiece reads each of those words alone, so a
    text's ids are its words' ids one after the other, cut to ``max_length``. The library's pipeline builds a whole
    encoding (offsets, masks, type ids) per text: 12 us for a title alone, 9 us a title in batches. Splitting in
    Python and looking the words up took 8 us alone and 5 us in batches, and a batch of words never seen before
    (read by the library as one pre-split text) 9 us a title ("Tokenizing for prediction" in docs/benchmarks.md).
    At most ``MAX_WORDS`` words are remembered, plus one call's (about 250 bytes a word); past that the memory
    starts afresh.
    """

    MAX_WORDS = 1 << 17

    def __init__(self, unnormalized: str, lowercase: bool):
        self._backend = tokenizers.Tokenizer.from_str(unnormalized)
        self._split = re.compile(r"[a-z0-9]+|[^a-z0-9 ]" if lowercase else r"[A-Za-z0-9]+|[^A-Za-z0-9 ]").findall
        self._ids: dict[str, tuple[int, ...]] = {}

    def ids(self, texts: list[str], max_length: int) -> list[np.ndarray]:
        """Token ids (int32) of normalised ASCII ``texts``, each cut to ``max_length``."""
        words = [self._split(text) for text in texts]
        known = self._ids  # a thread that starts the memory afresh leaves this one's words in place
        new = list({word: None for row in words for word in row if word not in known})
        if new:
            if len(known) + len(new) > self.MAX_WORDS:
                known = self._ids = {}
                new = list({word: None for row in words for word in row})
            pieces: dict[str, list[int]] = {word: [] for word in new}  # the new words read as one pre-split text
            encoding = self._backend.encode(new, is_pretokenized=True, add_special_tokens=False)
            for token, word_index in zip(encoding.ids, encoding.word_ids, strict=True):
                assert word_index is not None  # without special tokens, every id comes from a word
                pieces[new[word_index]].append(token)
            # each word published with all its ids at once: another thread may be reading
            known.update((word, tuple(ids)) for word, ids in pieces.items())
        out = []
        for row in words:
            ids: list[int] = []
            for word in row:
                ids += known[word]
                if len(ids) >= max_length:
                    break
            out.append(np.asarray(ids[:max_length], dtype=np.int32))
        return out


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise ValueError("expected a sequence of texts, got a single string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"text {i} is {type(t).__name__}, not a string")


def _alphabet(texts: Sequence[str], normalizer: normalizers.Normalizer, chunk: int = 10_000) -> list[str]:
    """Sorted characters of the normalised texts, whitespace excluded."""
    chars: set[str] = set()
    for i in range(0, len(texts), chunk):
        chars.update(normalizer.normalize_str("\n".join(texts[i : i + chunk])))
    return sorted(c for c in chars if not c.isspace())


def _bert_from_vocab(vocab_file: Path, lowercase: bool) -> tokenizers.Tokenizer:
    """A BERT WordPiece pipeline around a ``vocab.txt`` file (one token per line, id = line number)."""
    backend = tokenizers.Tokenizer(models.WordPiece.from_file(str(vocab_file), unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None:
        backend.post_processor = processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    backend.add_special_tokens([t for t in SPECIAL_TOKENS if backend.token_to_id(t) is not None])
    return backend


def _find_pad_token(backend: tokenizers.Tokenizer, config: dict) -> str | None:
    """The pad token named by ``tokenizer_config.json``, the padding settings, or a usual name."""
    named = config.get("pad_token")
    if isinstance(named, dict):
        named = named.get("content")
    padding = backend.padding
    candidates = [named, padding["pad_token"] if padding else None, *_PAD_CANDIDATES]
    return next((t for t in candidates if isinstance(t, str) and backend.token_to_id(t) is not None), None)
