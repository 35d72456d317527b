"""A trained dual-encoder model directory: everything needed to predict, nothing of the training data.

Layout::

    MODEL_DIR/
      config.yaml            the recipe the model was trained with
      meta.json              training metadata (data fingerprint, versions, validation metrics, times)
      encoder/               encoder.json, safetensors weights, tokenizer
      heads.json, heads.safetensors   UniDEC / DePSL heads, or DEXA's classifiers (absent for a plain dual encoder)
      labels.jsonl           label ids and texts (row i = label i)
      label_embeddings.npy   label-side search vectors, L x d (normalised embeddings, UniDEC's concatenation,
                             DEXA's fused vectors)
      index/                 the search index over the label embeddings
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from xdex.atomic import atomic_path, atomic_write_text
from xdex.index import ExactIndex, Index, load_index
from xdex.inference.retrieval import retrieve
from xdex.metrics.ranking import Ranking
from xdex.modules import ClassifierFusionNet, DualEncoder, UniDECNet, load_net
from xdex.text.jsonfile import read_json, write_json

MARKER = "meta.json"


@dataclass
class DualEncoderModel:
    """A dual encoder (plain, with UniDEC heads, or with DEXA's fused classifiers) with its label catalogue
    and index; ``predict`` ranks labels for texts."""

    net: DualEncoder | UniDECNet | ClassifierFusionNet
    label_ids: list[str]
    label_texts: list[str]
    label_embeddings: np.ndarray
    index: Index
    config: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def embed_texts(self, texts: list[str], batch_size: int = 512) -> np.ndarray:
        """Query-side search vectors of ``texts``."""
        return self.net.query_vectors(self.net.encoder.tokenize(texts), batch_size).numpy()

    def predict(self, texts: list[str], k: int = 10) -> Ranking:
        """Top-``k`` label rows and scores (inner products of search vectors) for each text, best first."""
        return retrieve(self.embed_texts(texts), self.index, k)

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
        z = net.label_vectors(net.encoder.tokenize(self.label_texts), batch_size).numpy()
        index = ExactIndex(z.shape[1], metric="ip")
        index.add(z)
        return dataclasses.replace(self, net=net, label_embeddings=z, index=index)

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
                    for i, (k, t) in enumerate(zip(self.label_ids, self.label_texts))),
        )
        atomic_write_text(folder / "config.yaml", yaml.safe_dump(self.config, sort_keys=False))
        write_json(folder / MARKER, self.meta)

    @classmethod
    def load(cls, folder: str | Path) -> DualEncoderModel:
        folder = Path(folder)
        if not (folder / MARKER).is_file():
            raise FileNotFoundError(f"{folder}: not an xdex model directory (no {MARKER})")
        net = load_net(folder)
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
        emb = np.load(folder / "label_embeddings.npy")
        if emb.shape[0] != len(ids):
            raise ValueError(f"{folder}: {emb.shape[0]} label embeddings for {len(ids)} labels")
        config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        meta = read_json(folder / MARKER)
        return cls(net, ids, texts, emb, load_index(folder / "index"), config, meta)


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
