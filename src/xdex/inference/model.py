"""A trained dual-encoder model directory: everything needed to predict, nothing of the training data.

Layout::

    MODEL_DIR/
      config.yaml            the recipe the model was trained with
      meta.json              training metadata (data fingerprint, versions, validation metrics, times)
      encoder/               encoder.json, safetensors weights, tokenizer
      heads.json, heads.safetensors   UniDEC / DePSL heads, DEXA's classifiers or OAK's augmentation block
                             (absent for a plain dual encoder)
      linker/                OAK only: the linker R, a model directory of its own
      labels.jsonl           label ids and texts (row i = label i)
      label_embeddings.npy   label-side search vectors, L x d (normalised embeddings, UniDEC's concatenation,
                             DEXA's fused vectors)
      index/                 the search index over the label embeddings
      added_labels.npz       labels added after training, by their texts (absent when none; see
                             xdex.inference.added_labels)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from xdex.atomic import atomic_path, atomic_write_text
from xdex.index import ExactIndex, Index, load_index
from xdex.inference.added_labels import check_texts, fingerprint, new_keys, read_added, with_added, write_added
from xdex.inference.retrieval import retrieve
from xdex.metrics.ranking import Ranking
from xdex.modules import ClassifierFusionNet, DualEncoder, OakNet, UniDECNet, load_net
from xdex.text.jsonfile import read_json, write_json

MARKER = "meta.json"


@dataclass
class DualEncoderModel:
    """A dual encoder (plain, with UniDEC heads, or with DEXA's fused classifiers) with its label catalogue
    and index; ``predict`` ranks labels for texts.

    ``label_ids`` and ``label_texts`` are the catalogue: the trained labels, then those added after training
    (:meth:`with_labels`). ``label_embeddings`` and ``index`` hold the trained labels' search vectors,
    ``added_vectors`` the added labels', which are searched exactly."""

    net: DualEncoder | UniDECNet | ClassifierFusionNet | OakNet
    label_ids: list[str]
    label_texts: list[str]
    label_embeddings: np.ndarray
    index: Index
    config: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    added_vectors: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.added_vectors is None:
            self.added_vectors = np.zeros((0, self.label_embeddings.shape[1]), np.float32)
        if not len(self.label_ids) == len(self.label_texts) == self.n_trained + len(self.added_vectors):
            raise ValueError(f"{len(self.label_ids)} label ids and {len(self.label_texts)} texts for "
                             f"{self.n_trained} trained and {len(self.added_vectors)} added label vectors")

    @property
    def n_trained(self) -> int:
        """The number of labels the model was trained on (rows ``0 .. n_trained - 1``)."""
        return len(self.label_embeddings)

    def embed_texts(self, texts: list[str], batch_size: int = 512) -> np.ndarray:
        """Query-side search vectors of ``texts``."""
        if isinstance(self.net, OakNet):  # reads the raw texts: its linker has a tokenizer of its own
            return self.net.text_vectors(texts, batch_size).numpy()
        return self.net.query_vectors(self.net.encoder.tokenize(texts), batch_size).numpy()

    def predict(self, texts: list[str], k: int = 10) -> Ranking:
        """Top-``k`` label rows and scores (inner products of search vectors; OAK's re-scored candidates) for
        each text, best first."""
        if isinstance(self.net, OakNet):
            return self.net.rank(texts, self.index, k, added=self.added_vectors)
        queries = self.embed_texts(texts)
        return with_added(retrieve(queries, self.index, k), queries, self.added_vectors, self.n_trained, k)

    @property
    def search(self) -> str:
        """How queries meet labels: ``"de"`` for a dual encoder; UniDEC also ``"concat"`` or ``"clf"``."""
        return self.net.search

    def with_search(self, mode: str, batch_size: int = 512) -> DualEncoderModel:
        """This model searching in another mode of its network (UniDEC Table 5: ``"concat"``, ``"de"``,
        ``"clf"``; DEXA: ``"fused"``, ``"de"``, ``"clf"``): label vectors are recomputed and searched
        exactly. The model itself is left unchanged."""
        if mode == self.search:
            return self
        modes = self.net.search_modes
        if mode not in modes:
            raise ValueError(f"search mode {mode!r} is not one of this model's: {', '.join(modes)}")
        net = copy.deepcopy(self.net)
        net.search = mode
        z = net.label_vectors(net.encoder.tokenize(self.label_texts[: self.n_trained]), batch_size).numpy()
        index = ExactIndex(z.shape[1], metric="ip")
        index.add(z)
        added = _new_label_vectors(net, self.label_texts[self.n_trained :], batch_size)
        return dataclasses.replace(self, net=net, label_embeddings=z, index=index, added_vectors=added)

    def with_labels(
        self, texts: Sequence[str], keys: Sequence[str] | None = None, batch_size: int = 512
    ) -> DualEncoderModel:
        """This model with more labels, known by their texts alone (zero-shot): the network's
        ``new_label_vectors`` embeds them and they are searchable at once, at the rows after the current ones.
        ``keys`` are checked to be new (:class:`~xdex.inference.added_labels.KeyConflict` otherwise), or are
        generated as ``added-<row>``. The model itself is left unchanged; :meth:`save_added` persists them."""
        texts = check_texts(texts)
        keys = new_keys(len(texts), len(self.label_ids), set(self.label_ids), keys)
        if not texts:
            return self
        vectors = np.concatenate([self.added_vectors, _new_label_vectors(self.net, texts, batch_size)])
        return dataclasses.replace(self, label_ids=[*self.label_ids, *keys], label_texts=[*self.label_texts, *texts],
                                   added_vectors=vectors)

    def save_added(self, folder: str | Path) -> None:
        """Write the labels added after training to ``folder/added_labels.npz`` (atomically; removed when there
        are none). The trained files are not touched."""
        n = self.n_trained
        write_added(folder, self.label_ids[n:], self.label_texts[n:], self.added_vectors, self.search, n,
                    fingerprint(self.meta, self.config, self.label_ids[:n]))

    def save(self, folder: str | Path) -> None:
        """Write the model directory; files are replaced atomically, other files are left alone."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _replace_dir(folder / "encoder", self.net.encoder.save)
        if hasattr(self.net, "save_heads"):
            self.net.save_heads(folder)  # UniDEC heads, DEXA classifiers
        _replace_dir(folder / "index", self.index.save)
        with atomic_path(folder / "label_embeddings.npy") as tmp, open(tmp, "wb") as f:
            np.save(f, self.label_embeddings.astype(np.float32))
        atomic_write_text(
            folder / "labels.jsonl",
            "".join(json.dumps({"id": i, "key": k, "text": t}, ensure_ascii=False) + "\n"
                    for i, (k, t) in enumerate(zip(self.label_ids[: self.n_trained], self.label_texts))),
        )
        self.save_added(folder)
        atomic_write_text(folder / "config.yaml", yaml.safe_dump(self.config, sort_keys=False))
        write_json(folder / MARKER, self.meta)

    @classmethod
    def load(cls, folder: str | Path) -> DualEncoderModel:
        folder = Path(folder)
        if not (folder / MARKER).is_file():
            raise FileNotFoundError(f"{folder}: not an xdex model directory (no {MARKER})")
        net = load_net(folder, load_linker=cls.load)  # OAK's linker is a model directory of its own
        net.eval()
        ids, texts = [], []
        path = folder / "labels.jsonl"
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                    ids.append(str(row["key"]))
                    texts.append(str(row["text"]))
                except (ValueError, KeyError) as e:
                    raise ValueError(f"{path}:{line_no}: damaged label row ({e})") from None
        emb = np.load(folder / "label_embeddings.npy", mmap_mode="r")  # read-only, paged in on use: L may be 10^6
        if emb.shape[0] != len(ids):
            raise ValueError(f"{folder}: {emb.shape[0]} label embeddings for {len(ids)} labels")
        config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        meta = read_json(folder / MARKER)
        added, vectors = read_added(folder, ids, fingerprint(meta, config, ids), net.search, emb.shape[1]), None
        if added is not None:  # vectors for another search mode are recomputed
            vectors = added.vectors if added.vectors is not None else _new_label_vectors(net, added.texts, 512)
            ids, texts = ids + added.keys, texts + added.texts
        return cls(net, ids, texts, emb, load_index(folder / "index"), config, meta, vectors)


def _new_label_vectors(net: DualEncoder | UniDECNet | ClassifierFusionNet | OakNet, texts: list[str],
                       batch_size: int) -> np.ndarray:
    """The network's zero-shot label vectors of ``texts`` (``new_label_vectors``), float32 ``[len(texts), d]``."""
    return net.new_label_vectors(net.encoder.tokenize(texts), batch_size).numpy().astype(np.float32, copy=False)


def _replace_dir(target: Path, write) -> None:
    """Write a sub-folder next to ``target`` and swap it in, so a crash never leaves a half-written one."""
    tmp = target.with_name(f".{target.name}.tmp")
    old = target.with_name(f".{target.name}.old")
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    write(tmp)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
