"""Tokenisation, token-id caches and batch collation for the encoders."""

from xdex.text.cache import TokenCache, default_cache_dir
from xdex.text.collate import bag_inputs, padded_inputs
from xdex.text.tokenizer import Tokenizer
from xdex.text.tokens import TokenizedTexts

__all__ = ["TokenCache", "TokenizedTexts", "Tokenizer", "bag_inputs", "default_cache_dir", "padded_inputs"]
