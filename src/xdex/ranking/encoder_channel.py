"""A pre-trained sentence encoder as a channel of the ranking stage, zero-shot (``ranker.encoder: minilm``).

The network is trained on the dataset's pairs; a sentence encoder pre-trained on a billion sentence pairs
(all-MiniLM-L6-v2, from the ``pretrained`` extra: :mod:`xdex.encoders.packaged`) knows what words mean where the
training pairs are few, and its errors are not the network's. Used as it is (never trained here), it embeds the
label texts once when the ranking stage is fitted and each text at prediction; the cosine of the two is one more
channel for the fusion, which learns its weight on the validation documents:

* **Shortlist**: the ``encoder_candidates`` labels of highest cosine (exact search over every label vector);
* **Features** (:data:`ENCODER_FEATURES`): the cosine ``encoder``, its gap to the text's best cosine over every
  label ``encoder_gap``, and 1 / (2 + rank) in the shortlist ``encoder_rrank`` (0 outside it).

A label added after training is embedded from its text when it is added, so it has the channel's features too.
Files (``ranker/encoder/``): ``channel.json`` (format, version, the packaged model's name, the encoder's token
limit, where its weights come from) and ``label_vectors.npy`` (float32, one unit row per trained label); the
weights themselves are read from the installed package, never copied.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from xdex.atomic import atomic_write_bytes
from xdex.encoders.base import Encoder
from xdex.encoders.packaged import PRETRAINED, PackagedModel, model_dir, source_name
from xdex.jsonfile import read_json, write_json
from xdex.metrics.ranking import PAD

ENCODER_FEATURES = ("encoder", "encoder_gap", "encoder_rrank")
FORMAT = "xdex-encoder-channel"
VERSION = 1
MAX_LENGTH = 128  # word pieces read per text (all-MiniLM-L6-v2 was trained on texts of up to 128)
BATCH = 128


class EncoderChannel:
    """The label vectors of a pre-trained sentence encoder and the encoder that embeds texts (module docstring)."""

    def __init__(self, name: str, label_vectors: np.ndarray, encoder: Encoder | None = None) -> None:
        self.name = name
        self.label_vectors = np.ascontiguousarray(label_vectors, np.float32)
        self._encoder = encoder if encoder is not None else build_encoder(name)

    @classmethod
    def fit(cls, name: str, label_texts: Sequence[str]) -> EncoderChannel:
        """The channel of the packaged encoder ``name`` over the labels ``label_texts``."""
        channel = cls(name, np.zeros((0, 0), np.float32))
        channel.label_vectors = channel.embed(label_texts)
        return channel

    @property
    def n_labels(self) -> int:
        return len(self.label_vectors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors of ``texts`` ``[n, dim]`` (float32)."""
        encoder = self._encoder
        with torch.inference_mode():
            vectors = encoder.embed(encoder.tokenize(list(texts)), BATCH).numpy()
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)

    def with_labels(self, label_texts: Sequence[str]) -> EncoderChannel:
        """A channel with the labels of ``label_texts`` added after these (this one is unchanged)."""
        added = self.embed(label_texts) if len(label_texts) else np.zeros((0, self.label_vectors.shape[1]), np.float32)
        return EncoderChannel(self.name, np.concatenate([self.label_vectors, added]), self._encoder)

    def shortlist(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` labels of highest cosine with each of ``queries`` (the texts' :meth:`embed`), best first, and
        each text's best cosine over every label."""
        scores = queries @ self.label_vectors.T
        k = min(k, scores.shape[1])
        if k == 0:
            return np.full((len(queries), 0), PAD, np.int64), scores.max(axis=1, initial=-np.inf)
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
        ids = np.take_along_axis(top, order, axis=1).astype(np.int64)
        return ids, np.take_along_axis(scores, ids[:, :1], axis=1)[:, 0]

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
        return cls(name, vectors)


def sentence_encoder(name: str) -> PackagedModel:
    """The packaged transformer called ``name``; any other name is refused, naming those there are."""
    if name not in PRETRAINED or PRETRAINED[name].kind != "transformer":
        transformers = [known for known, model in PRETRAINED.items() if model.kind == "transformer"]
        raise ValueError(f"ranker.encoder must be null or a packaged sentence encoder ({', '.join(transformers)}), "
                         f"not {name!r}")
    return PRETRAINED[name]


def build_encoder(name: str) -> Encoder:
    """The packaged transformer ``name`` with mean pooling, bf16 where the CPU computes in it."""
    from xdex.encoders.transformer import Transformer  # transformers loads only when it is used
    from xdex.hardware import cpu_has_bf16

    encoder = Transformer(model_dir(sentence_encoder(name)), pooling="mean", max_length=MAX_LENGTH,
                          bf16=cpu_has_bf16())
    encoder.eval()
    return encoder
