"""Token ids computed once and kept on disk, memory-mapped when read back.

An entry is two ``.npy`` files, the flat int32 ids and the int64 offsets of
:class:`~xdex.text.tokens.TokenizedTexts`, named by a key that hashes the texts, the tokenizer
fingerprint, ``max_length`` and whether special tokens are added, so that changing any of them
makes a new entry. Both files are written atomically, the offsets last: an entry whose offsets
file exists is complete.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xdex.atomic import atomic_path
from xdex.text.tokenizer import Tokenizer
from xdex.text.tokens import TokenizedTexts

logger = logging.getLogger(__name__)

CACHE_ENV = "XDEX_CACHE_DIR"
_FORMAT = "xdex-token-cache-v1"


def default_cache_dir() -> Path:
    """``$XDEX_CACHE_DIR`` if set, else ``~/.cache/xdex``; token caches go to its ``tokens`` folder."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root) if root else Path.home() / ".cache" / "xdex").expanduser()


def texts_digest(texts: Sequence[str]) -> str:
    """SHA-256 of the texts, in order (each text length-prefixed, so no two lists collide by joining)."""
    h = hashlib.sha256()
    h.update(len(texts).to_bytes(8, "little"))
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class TokenCache:
    """Tokenise texts once with ``tokenizer``; later calls with the same texts read the ids from disk."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        max_length: int,
        *,
        special_tokens: bool = False,
        folder: str | Path | None = None,
    ):
        if max_length < 1:
            raise ValueError(f"max_length must be positive, got {max_length}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.special_tokens = special_tokens
        self.folder = Path(folder) if folder is not None else default_cache_dir() / "tokens"

    def key(self, texts: Sequence[str]) -> str:
        """Entry name for ``texts`` under this tokenizer and length."""
        parts = [_FORMAT, self.tokenizer.fingerprint(), str(self.max_length), str(self.special_tokens)]
        parts.append(texts_digest(texts))
        return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:32]

    def paths(self, key: str) -> tuple[Path, Path]:
        """The ids and offsets files of an entry."""
        return self.folder / f"{key}.ids.npy", self.folder / f"{key}.offsets.npy"

    def get(self, texts: Sequence[str]) -> TokenizedTexts:
        """The token ids of ``texts``, memory-mapped from the cache (tokenised and stored on a miss)."""
        key = self.key(texts)
        cached = self._read(key, len(texts))
        if cached is not None:
            logger.debug("token cache hit %s (%d texts)", key, len(texts))
            return cached
        logger.info("tokenising %d texts into the token cache %s", len(texts), self.folder)
        tokens = self.tokenizer.tokenize(texts, self.max_length, self.special_tokens)
        ids_path, offsets_path = self.paths(key)
        for path, array in ((ids_path, tokens.ids), (offsets_path, tokens.offsets)):
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                np.save(f, array)
        result = self._read(key, len(texts))
        if result is None:
            raise OSError(f"{offsets_path}: the token cache entry just written cannot be read back")
        return result

    def _read(self, key: str, n_texts: int) -> TokenizedTexts | None:
        ids_path, offsets_path = self.paths(key)
        if not offsets_path.is_file():
            return None
        try:
            tokens = TokenizedTexts(np.load(ids_path, mmap_mode="r"), np.load(offsets_path, mmap_mode="r"))
        except (OSError, ValueError) as e:
            logger.warning("ignoring the unreadable token cache entry %s (%s)", offsets_path, e)
            return None
        if len(tokens) != n_texts:
            logger.warning("ignoring the token cache entry %s: %d texts, expected %d", key, len(tokens), n_texts)
            return None
        return tokens
