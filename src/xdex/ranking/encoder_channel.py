"""A pre-trained sentence encoder as a channel of the ranking stage, zero-shot (``ranker.encoder``).

The network is trained on the dataset's pairs; a sentence encoder pre-trained on a billion sentence pairs
(all-MiniLM-L6-v2, from the ``pretrained`` extra: :mod:`xdex.encoders.packaged`) knows what words mean where the
training pairs are few, and its errors are not the network's. Used as it is (never trained here), it embeds the
label texts once when the ranking stage is fitted and each text at prediction; the cosine of the two is one more
channel for the fusion, which learns its weight on the validation documents. Two encoders are packaged:

* ``minilm``: the transformer itself, mean-pooled; a transformer pass over every text predicted;
* ``minilm-static``: the mean of its static token vectors (distilled from it, :mod:`xdex.encoders.static`; their
  SIF weights make the mean a weighted one), a bag-of-embeddings lookup per text. The vectors are distilled once
  per machine, so the model directory keeps its own copy: a model scores alike wherever it is loaded.

The channel gives:

* **Shortlist**: the ``encoder_candidates`` labels of highest cosine (exact search over every label vector);
* **Features** (:data:`ENCODER_FEATURES`): the cosine ``encoder``, its gap to the text's best cosine over every
  label ``encoder_gap``, and 1 / (2 + rank) in the shortlist ``encoder_rrank`` (0 outside it).

A label added after training is embedded from its text when it is added, so it has the channel's features too.
Files (``ranker/encoder/``): ``channel.json`` (format, version, the packaged model's name, the encoder's token
limit, where its weights come from), ``label_vectors.npy`` (float32, one unit row per trained label) and, for
``minilm-static``, ``encoder/`` (the bag encoder: tokenizer and static vectors); a transformer's weights are read
from the installed package, never copied.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from xdex.atomic import atomic_write_bytes
from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.base import Encoder
from xdex.encoders.factory import build_encoder as build_packaged_encoder
from xdex.encoders.packaged import PRETRAINED, PackagedModel, source_name
from xdex.index.exact import ExactIndex
from xdex.jsonfile import read_json, write_json

ENCODER_FEATURES = ("encoder", "encoder_gap", "encoder_rrank")
FORMAT = "xdex-encoder-channel"
VERSION = 1
MAX_LENGTH = 128  # word pieces read per text (all-MiniLM-L6-v2 was trained on texts of up to 128)
BATCH = 128
ENCODER_DIR = "encoder"  # a bag encoder's own files, inside the channel's folder


class EncoderChannel:
    """The label vectors of a pre-trained sentence encoder and the encoder that embeds texts (module docstring)."""

    def __init__(self, name: str, label_vectors: np.ndarray, encoder: Encoder | None = None) -> None:
        self.name = name
        self._encoder = encoder if encoder is not None else build_encoder(name)
        self._index = ExactIndex(label_vectors.shape[1])  # the shortlist's search (int8 codes made as it pays)
        self._index.add(label_vectors)

    @classmethod
    def fit(cls, name: str, label_texts: Sequence[str]) -> EncoderChannel:
        """The channel of the packaged encoder ``name`` over the labels ``label_texts``."""
        encoder = build_encoder(name)
        return cls(name, embed(encoder, label_texts), encoder)

    @property
    def label_vectors(self) -> np.ndarray:
        """One unit row per label ``[L, dim]`` (float32, read-only)."""
        return self._index.vectors()

    @property
    def n_labels(self) -> int:
        return len(self.label_vectors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors of ``texts`` ``[n, dim]`` (float32)."""
        return embed(self._encoder, texts)

    def with_labels(self, label_texts: Sequence[str]) -> EncoderChannel:
        """A channel with the labels of ``label_texts`` added after these (this one is unchanged)."""
        added = self.embed(label_texts) if len(label_texts) else np.zeros((0, self.label_vectors.shape[1]), np.float32)
        return EncoderChannel(self.name, np.concatenate([self.label_vectors, added]), self._encoder)

    def shortlist(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` labels of highest cosine with each of ``queries`` (the texts' :meth:`embed`), best first, and
        each text's best cosine over every label."""
        k = min(k, self.n_labels)
        scores, ids = self._index.search(queries, max(k, 1))  # exact, ties to the lower id
        best = scores[:, 0] if self.n_labels else np.full(len(queries), -np.inf, np.float32)
        return ids[:, :k], best

    def features(self, queries: np.ndarray, ids: np.ndarray, shortlist: np.ndarray, best: np.ndarray) -> np.ndarray:
        """The :data:`ENCODER_FEATURES` of candidate labels ``ids`` ``[n, C]`` (-1: none) ``[n, C, 3]``, given the
        texts' vectors ``queries``, their :meth:`shortlist` and best cosines; 0 in an empty slot."""
        valid = ids >= 0
        vectors = self.label_vectors[np.where(valid, ids, 0)]  # [n, C, dim]
        cosine = np.einsum("ncd,nd->nc", vectors, queries)
        hit = (ids[:, :, None] == shortlist[:, None, :]) & valid[:, :, None]  # [n, C, K]
        rank = np.where(hit.any(axis=2), 1.0 / (2.0 + hit.argmax(axis=2)), 0.0)
        out = np.stack([cosine, cosine - best[:, None], rank], axis=2).astype(np.float32)
        out[~valid] = 0.0
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, folder: str | Path, n_labels: int) -> None:
        """Write ``folder`` with the vectors of the first ``n_labels`` labels (the trained ones)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, self.label_vectors[:n_labels], allow_pickle=False)
        atomic_write_bytes(folder / "label_vectors.npy", buffer.getvalue())
        if isinstance(self._encoder, BagOfEmbeddings):
            self._encoder.save(folder / ENCODER_DIR)
        write_json(folder / "channel.json", {"format": FORMAT, "version": VERSION, "encoder": self.name,
                                             "max_length": MAX_LENGTH,
                                             "weights": source_name(sentence_encoder(self.name))})

    @classmethod
    def load(cls, folder: str | Path, n_labels: int) -> EncoderChannel:
        """Read a channel written by :meth:`save` for a model of ``n_labels`` trained labels; its encoder from the
        installed package (a clear error naming the extra when it is not installed)."""
        folder = Path(folder)
        path = folder / "channel.json"
        record = read_json(path)
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
            raise ValueError(f"{path}: not an xdex encoder channel of version {VERSION}")
        name = record.get("encoder")
        if not isinstance(name, str):
            raise ValueError(f"{path}: damaged settings (no encoder name)")
        try:
            vectors = np.load(folder / "label_vectors.npy", allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"{folder / 'label_vectors.npy'}: damaged label vectors ({e})") from None
        if vectors.ndim != 2 or len(vectors) != n_labels or vectors.dtype != np.float32:
            raise ValueError(f"{folder / 'label_vectors.npy'} holds {vectors.shape} {vectors.dtype} vectors for the "
                             f"model's {n_labels} labels")
        model = sentence_encoder(name)
        encoder = None
        if model.kind == "bag":
            try:
                encoder = BagOfEmbeddings.load(folder / ENCODER_DIR)
            except (OSError, ValueError, KeyError) as e:
                raise ValueError(f"{folder / ENCODER_DIR}: missing or damaged static vectors of the {name} channel "
                                 f"({e})") from None
            encoder.eval()
        return cls(name, vectors, encoder)


def embed(encoder: Encoder, texts: Sequence[str]) -> np.ndarray:
    """Unit-length vectors of ``texts`` by ``encoder`` ``[n, dim]`` (float32)."""
    with torch.inference_mode():
        vectors = encoder.embed(encoder.tokenize(list(texts)), BATCH).numpy()
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def sentence_encoder(name: str) -> PackagedModel:
    """The packaged encoder called ``name``; any other name is refused, naming those there are."""
    if name not in PRETRAINED:
        raise ValueError(f"ranker.encoder must be null or a packaged sentence encoder ({', '.join(PRETRAINED)}), "
                         f"not {name!r}")
    return PRETRAINED[name]


def build_encoder(name: str) -> Encoder:
    """The packaged encoder ``name`` as ``encoder.pretrained`` builds it: the transformer with mean pooling (bf16 where
    the CPU computes in it), or the plain mean of the static vectors (``weighting: none``: their SIF weights are in
    the vectors already)."""
    own = {"weighting": "none", "sparse": False} if sentence_encoder(name).kind == "bag" else {"pooling": "mean"}
    encoder = build_packaged_encoder({"pretrained": name, "max_length": MAX_LENGTH, **own})
    encoder.eval()
    return encoder
