"""A trained dual-encoder model directory: everything needed to predict, nothing of the training data.

Layout::

    MODEL_DIR/
      config.yaml            the recipe the model was trained with
      meta.json              training metadata (data fingerprint, versions, validation metrics, times) and
                             "files": the size and SHA-256 of every file below (not added_labels.npz), checked at
                             load; written last
      encoder/               encoder.json, safetensors weights, tokenizer
      heads.json, heads.safetensors   UniDEC / DePSL heads, DEXA's classifiers or OAK's augmentation block
                             (absent for a plain dual encoder)
      linker/                OAK only: the linker R, a model directory of its own (its files are listed too)
      labels.jsonl           label ids and texts (row i = label i)
      label_embeddings.npy   label-side search vectors, L x d (normalised embeddings, UniDEC's concatenation,
                             DEXA's fused vectors)
      index/                 the search index over the label embeddings
      ranker/                the ranking stage: lexical model and fusion weights (absent when the recipe has none;
                             see xdex.ranking.ranker)
      added_labels.npz       labels added after training, by their texts (absent when none; see
                             xdex.inference.added_labels)
      README.md              the model card, for people (written by training, not listed in meta.json: see
                             xdex.inference.card)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import torch
import yaml

from xdex.atomic import atomic_path, atomic_write_text
from xdex.config import ConfigError, read_yaml
from xdex.hardware import resolve_device
from xdex.index import ExactIndex, Index, load_index
from xdex.index.storage import file_digest, read_meta
from xdex.inference.added_labels import check_texts, fingerprint, new_keys, read_added, write_added
from xdex.jsonfile import parse_json_line, read_json, write_json
from xdex.methods.schema import RecipeConfig, upgrade_names  # pure data: no training code
from xdex.metrics.ranking import Ranking
from xdex.modules import load_net
from xdex.modules.network import Network
from xdex.ranking.channels import TextChannels
from xdex.ranking.ranker import DENSE, Ranker
from xdex.ranking.ranker import MODES as RANKER_MODES

log = logging.getLogger(__name__)

MARKER = "meta.json"
CONFIG = "config.yaml"
FILES = "files"  # meta.json's record of the files written: relative path -> {"bytes", "sha256"}
ENCODER_DIR, INDEX_DIR, RANKER_DIR = "encoder", "index", "ranker"
TOP_FILES = (CONFIG, "labels.jsonl", "label_embeddings.npy", "heads.json", "heads.safetensors")


@dataclass
class DualEncoderModel:
    """A trained model of any recipe (the network: a plain dual encoder, UniDEC heads, DEXA's fused classifiers
    or OAK's augmented network) with its label catalogue and index; ``predict`` ranks labels for texts. Users
    meet it as :class:`xdex.Model`, which adds training, named predictions and added labels in place.

    ``label_ids`` and ``label_texts`` are the catalogue: the trained labels, then those added after training
    (:meth:`with_labels`). ``label_embeddings`` and ``index`` hold the trained labels' search vectors,
    ``added_vectors`` the added labels', which are searched exactly."""

    net: Network
    label_ids: list[str]
    label_texts: list[str]
    label_embeddings: np.ndarray
    index: Index
    config: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    added_vectors: np.ndarray | None = None
    ranker: Ranker | None = None
    channel: str | None = None  # "fused" or "lexical": the ranker's ranking; None: the ranker's choice, else the
    # network's own search
    channels: TextChannels | None = field(default=None, repr=False, compare=False)  # the ranker's text channels
    # over label_texts (mentions, sentence encoder), built here
    _label_table: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.added_vectors is None:
            self.added_vectors = np.zeros((0, self.label_embeddings.shape[1]), np.float32)
        if self.ranker is not None and self.channel is None and self.ranker.served in RANKER_MODES:
            self.channel = self.ranker.served  # the ranking chosen on validation (else the network's own)
        if self.channel is not None and (self.ranker is None or self.channel not in RANKER_MODES):
            raise ValueError(f"search mode {self.channel!r} needs a ranking stage of the model")
        if not len(self.label_ids) == len(self.label_texts) == self.n_trained + len(self.added_vectors):
            raise ValueError(f"{len(self.label_ids)} label ids and {len(self.label_texts)} texts for "
                             f"{self.n_trained} trained and {len(self.added_vectors)} added label vectors")
        # the channels that read label texts, over every label: those of a model this one was made from are
        # extended by the labels added since
        self.channels = None if self.ranker is None else self.ranker.text_channels(self.label_texts, self.channels)

    @property
    def n_trained(self) -> int:
        """The number of labels the model was trained on (rows ``0 .. n_trained - 1``)."""
        return len(self.label_embeddings)

    def embed_texts(self, texts: list[str], batch_size: int = 512) -> np.ndarray:
        """Query-side search vectors of ``texts``."""
        return self.net.text_vectors(texts, batch_size).numpy()

    def to(self, device: str | torch.device) -> DualEncoderModel:
        """Embed texts on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, or ``"auto"``: a GPU where there is one):
        the network's encoder moves there, and those of the model directories it holds (OAK's linker). Its heads,
        label tables, the label search and the ranking stage stay on the CPU, where the encoder's embeddings come
        back (``Encoder.embed``), so no label table crosses over per batch. A model loads on the CPU. Returns the
        model itself, as ``nn.Module.to`` does."""
        target = resolve_device(str(device))
        self.net.encoder.to(target)
        for part in self.net.parts().values():
            part.to(target)
        return self

    def predict(self, texts: list[str], k: int = 10) -> Ranking:
        """Top-``k`` label rows and scores for each text, best first: the ranking stage's fused scores, or (without
        one, or in a network's search mode) inner products of search vectors (OAK: its re-scored candidates)."""
        if self.channel is None or self.ranker is None:
            return self.net.rank(texts, self.index, k, added=self.added_vectors)
        queries = (lambda: self.embed_texts(texts)) if self.channel == "fused" else None
        return self.ranker.rank(texts, queries, self.index, self._label_vectors, k, self.added_vectors,
                                self.channel, self.net.head_scores, self.channels)

    def _label_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The search vectors of label ``rows`` (any shape), trained or added."""
        n, added_vectors = self.n_trained, self.added_vectors
        table = self._label_table
        if table is None:  # the plain array under a memory map: indexing it skips np.memmap's wrapping
            table = self._label_table = np.asarray(self.label_embeddings)
        if added_vectors is None or not len(added_vectors):  # every row is a trained label's
            return np.asarray(table[rows], dtype=np.float32)
        trained = np.asarray(table[np.minimum(rows, n - 1)], dtype=np.float32)
        added = added_vectors[np.clip(rows - n, 0, len(added_vectors) - 1)]
        return np.where((rows >= n)[..., None], added, trained)

    @property
    def search(self) -> str:
        """How texts meet labels: with a ranking stage ``"fused"``, ``"lexical"`` or ``"dense"`` (the network's own
        ranking, where the stage chose it on validation); without one the network's mode (``"de"`` for a dual
        encoder; UniDEC also ``"concat"`` or ``"clf"``; DEXA ``"fused"``, ``"clf"``)."""
        if self.channel is not None:
            return self.channel
        return DENSE if self.ranker is not None else self.net.search

    @property
    def search_modes(self) -> tuple[str, ...]:
        """Every mode :meth:`with_search` takes: with a ranking stage ``"fused"``, ``"lexical"`` and ``"dense"``
        (the network's own ranking, without the stage; its own name is taken too), then the network's other
        modes."""
        if self.ranker is None:
            return tuple(self.net.search_modes)
        own = (*RANKER_MODES, DENSE, self.net.search)  # "dense" is the network's own mode
        return (*RANKER_MODES, DENSE, *(m for m in self.net.search_modes if m not in own))

    def with_search(self, mode: str, batch_size: int = 512) -> DualEncoderModel:
        """This model ranking in another mode: the ranking stage's ``"fused"`` (every channel) or ``"lexical"``
        (the lexical channel alone), ``"dense"`` (the network's own ranking alone), or another mode of the
        network (UniDEC Table 5: ``"concat"``, ``"de"``, ``"clf"``; DEXA: ``"de"``, ``"clf"``), whose label
        vectors are recomputed and searched exactly. The model itself is left unchanged."""
        if mode == self.search:
            return self
        if mode not in self.search_modes and mode != self.net.search:  # the network's own mode: "dense"
            raise ValueError(f"search mode {mode!r} is not one of this model's: {', '.join(self.search_modes)}")
        if self.ranker is not None and mode in RANKER_MODES:
            return dataclasses.replace(self, channel=mode)
        if mode in (DENSE, self.net.search):  # the network's own vectors, without the ranking stage
            return dataclasses.replace(self, channel=None, ranker=None)
        net = copy.deepcopy(self.net)
        net.search = mode
        z = net.label_vectors(net.encoder.tokenize(self.label_texts[: self.n_trained]), batch_size).numpy()
        index = ExactIndex(z.shape[1], metric="ip")
        index.add(z)
        added = _new_label_vectors(net, self.label_texts[self.n_trained :], batch_size)
        return dataclasses.replace(self, net=net, label_embeddings=z, index=index, added_vectors=added, channel=None,
                                   ranker=None)

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
        assert self.added_vectors is not None  # __post_init__ makes it an empty array when there are none
        write_added(folder, self.label_ids[n:], self.label_texts[n:], self.added_vectors, self.search, n,
                    fingerprint(self.meta, self.config, self.label_ids[:n]))

    def save(self, folder: str | Path, owned: bool = False) -> None:
        """Write the model directory; files are replaced atomically, other files are left alone.

        ``meta.json``, written last, records the size and SHA-256 of every file written (``"files"``), which
        :meth:`load` checks. A sub-folder (``encoder/``, ``index/``) is replaced whole, so saving is refused
        when one holds a file that the directory's ``meta.json`` does not list: a file xdex did not write.
        ``owned``: the caller has checked that ``folder`` is its own (a training run's folder, which may hold
        the sub-folders of a save that was cut off before its ``meta.json``), so that check is skipped."""
        folder = Path(folder)
        if not owned:
            _check_replaceable(folder, (ENCODER_DIR, INDEX_DIR, RANKER_DIR))
        folder.mkdir(parents=True, exist_ok=True)
        _replace_dir(folder / ENCODER_DIR, self.net.encoder.save)
        self.net.save_heads(folder)  # UniDEC heads, DEXA classifiers, OAK's block and linker/
        _replace_dir(folder / INDEX_DIR, self.index.save)
        if self.ranker is not None:
            _replace_dir(folder / RANKER_DIR, self.ranker.save)
        elif (folder / RANKER_DIR).is_dir():  # a model saved without its ranking stage: the stage is not its
            shutil.rmtree(folder / RANKER_DIR)
        with atomic_path(folder / "label_embeddings.npy") as tmp, open(tmp, "wb") as f:
            np.save(f, self.label_embeddings.astype(np.float32))
        n = self.n_trained  # the trained labels; added ones live in added_labels.npz
        atomic_write_text(
            folder / "labels.jsonl",
            "".join(json.dumps({"id": i, "key": k, "text": t}, ensure_ascii=False) + "\n"
                    for i, (k, t) in enumerate(zip(self.label_ids[:n], self.label_texts[:n], strict=True))),
        )
        self.save_added(folder)
        atomic_write_text(folder / CONFIG, yaml.safe_dump(self.config, sort_keys=False))
        write_json(folder / MARKER, {**self.meta, FILES: _written_files(folder, self.net.model_subfolders)})

    @classmethod
    def load(cls, folder: str | Path, verify: bool = True) -> DualEncoderModel:
        """Read a model directory written by :meth:`save`. Every file ``meta.json`` lists is checked to have its
        recorded size and (unless ``verify`` is False) SHA-256; a damaged file, ``config.yaml`` or
        ``meta.json`` is a ``ValueError`` naming it."""
        folder = Path(folder)
        if not (folder / MARKER).is_file():
            raise FileNotFoundError(f"{folder}: not an xdex model directory (no {MARKER})")
        meta = _read_meta(folder)
        files = meta.pop(FILES, None)
        if files is None:
            log.debug("%s: written by an older xdex, without checksums of its files; not checked", folder)
        else:
            check_files(folder, files, verify)
        config = _read_config(folder / CONFIG)
        # the model directories a network holds (OAK's linker) are loaded here and handed to it
        net = load_net(folder, load_model=lambda path: cls.load(path, verify=verify))
        net.eval()
        labels = folder / "labels.jsonl"
        ids, texts = _read_labels(labels)
        path = folder / "label_embeddings.npy"
        try:
            emb = np.load(path, mmap_mode="r")  # read-only, paged in on use: L may be 10^6
        except (ValueError, OSError, EOFError) as e:
            raise ValueError(f"{path}: damaged label embeddings ({e})") from None
        if emb.ndim != 2 or emb.shape[0] != len(ids):
            raise ValueError(f"{path} holds {emb.shape[0] if emb.ndim else 0} label embeddings but {labels} has "
                             f"{len(ids)} labels; the model directory is damaged")
        added, vectors = read_added(folder, ids, fingerprint(meta, config, ids), net.search, emb.shape[1]), None
        if added is not None:  # vectors for another search mode are recomputed
            vectors = added.vectors if added.vectors is not None else _new_label_vectors(net, added.texts, 512)
            ids, texts = ids + added.keys, texts + added.texts
        # the index's own checksums are checked only where meta.json does not already cover its files
        index = load_index(folder / INDEX_DIR, verify=verify and files is None)
        ranker = Ranker.load(folder / RANKER_DIR, len(emb)) if (folder / RANKER_DIR).is_dir() else None
        return cls(net, ids, texts, emb, index, config, meta, vectors, ranker)


def _read_meta(folder: Path) -> dict:
    path = folder / MARKER
    try:
        meta = read_json(path)
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e}); the model directory is damaged") from None
    except ValueError as e:
        raise ValueError(f"{e}; the model directory is damaged") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object; the model directory is damaged")
    return meta


def _read_config(path: Path) -> dict:
    """The recipe in ``config.yaml``, checked to be one (no unknown key, values of the right types; settings renamed
    since an older xdex wrote it are checked under their new names). Returned as written, so fingerprints of the
    model (that added labels carry) do not change."""
    try:
        config = read_yaml(path)
        RecipeConfig.from_dict(upgrade_names(config))
    except ConfigError as e:
        message = str(e)
        raise ValueError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot be read ({e}); the model directory is damaged") from None
    except (ValueError, TypeError, RecursionError) as e:
        raise ValueError(f"{path}: not a recipe ({e}); the model directory is damaged") from None
    return config


def _read_labels(path: Path) -> tuple[list[str], list[str]]:
    """Label keys and texts from ``labels.jsonl``; a damaged row is a ``ValueError`` naming its line."""
    ids, texts = [], []
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e}); the model directory is damaged") from None
    for line_no, line in enumerate(data.splitlines(), 1):
        try:
            row = parse_json_line(line.decode("utf-8"))
            if not isinstance(row, dict) or not isinstance(row.get("key"), (str, int)) \
                    or not isinstance(row.get("text"), str):
                raise ValueError('expected an object with a "key" and a string "text"')
        except ValueError as e:  # invalid UTF-8 or JSON, a lone surrogate, nesting, a wrong row
            raise ValueError(f"{path}:{line_no}: damaged label row ({e})") from None
        ids.append(str(row["key"]))
        texts.append(row["text"])
    return ids, texts


def file_record(path: Path) -> dict:
    """The size and SHA-256 of a file, as ``meta.json`` lists them."""
    return {"bytes": path.stat().st_size, "sha256": file_digest(path)}


def _written_files(folder: Path, model_subfolders: Sequence[str]) -> dict[str, dict]:
    """Size and SHA-256 of every file :meth:`DualEncoderModel.save` wrote in ``folder`` (not ``meta.json``, nor
    ``added_labels.npz``, which changes after training and has a fingerprint of its own), by relative path; the
    files of ``model_subfolders`` (model directories of their own, e.g. OAK's linker) as their records say."""
    paths = [folder / name for name in TOP_FILES if (folder / name).is_file()]
    for sub in (ENCODER_DIR, INDEX_DIR, RANKER_DIR):
        paths += sorted(p for p in (folder / sub).rglob("*") if p.is_file())
    digests = read_meta(folder / INDEX_DIR, verify=False)["files"]  # the index's own, hashed as it wrote them
    out = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": digests[p.name]}
           if p.parent == folder / INDEX_DIR and p.name in digests else file_record(p) for p in paths}
    for sub in model_subfolders:  # written just now, with a record of their own
        out[f"{sub}/{MARKER}"] = file_record(folder / sub / MARKER)
        for name, record in read_json(folder / sub / MARKER)[FILES].items():
            out[f"{sub}/{name}"] = record
    return dict(sorted(out.items()))


def check_files(folder: Path, files: object, verify: bool = True) -> None:
    """Check that every file ``files`` (``meta.json``'s record) lists has its size and, if ``verify``, SHA-256."""
    marker = folder / MARKER
    if not isinstance(files, dict):
        raise ValueError(f'{marker}: "{FILES}" must be an object; the model directory is damaged')
    for name, record in files.items():
        if (not isinstance(record, dict) or not isinstance(record.get("bytes"), int)
                or not isinstance(record.get("sha256"), str) or not _inside(name)):
            raise ValueError(f'{marker}: damaged entry for {name!r} in "{FILES}"; the model directory is damaged')
        path = folder / name
        try:
            if not path.is_file():
                raise ValueError(f"{path} is missing; the model directory is damaged")
            what = ("size" if path.stat().st_size != record["bytes"]
                    else "checksum" if verify and file_record(path)["sha256"] != record["sha256"] else None)
        except OSError as e:
            raise ValueError(f"{path}: cannot be read ({e.strerror}); the model directory is damaged") from None
        if what is not None:
            raise ValueError(f"{path} has changed since the model was written ({what} differs); the model "
                             "directory is damaged")


def _inside(name: object) -> bool:
    """Whether ``name`` is a relative path that stays inside its folder."""
    if not isinstance(name, str) or not name or "\\" in name:
        return False
    parts = PurePosixPath(name).parts
    return not PurePosixPath(name).is_absolute() and ".." not in parts and "" not in parts


def _check_replaceable(folder: Path, subfolders: Sequence[str]) -> None:
    """Refuse to save into ``folder`` when a sub-folder that saving replaces holds a file that its
    ``meta.json`` does not list (or any file, when there is no readable ``meta.json`` listing files)."""
    present = [p for sub in subfolders if (folder / sub).is_dir() for p in (folder / sub).rglob("*") if p.is_file()]
    if not present:
        return
    listed: set[str] = set()
    if (folder / MARKER).is_file():
        try:
            meta = read_json(folder / MARKER)
            listed = set(meta.get(FILES) or {}) if isinstance(meta, dict) else set()
        except (OSError, ValueError, TypeError):
            listed = set()
    foreign = [p.relative_to(folder).as_posix() for p in present]
    foreign = [name for name in foreign if name not in listed]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise FileExistsError(f"{folder}: saving the model would replace {shown}, which xdex did not write (not "
                              f"listed in {MARKER}); save into another folder, or move them away")


def _new_label_vectors(net: Network, texts: list[str],
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
