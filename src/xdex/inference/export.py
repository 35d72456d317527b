"""Exporting a trained model's text tower as a sentence-transformers folder (``xdex export --format
sentence-transformers``), so that ``SentenceTransformer(OUT).encode(texts)`` gives the vectors xdex gives.

The tower is built from stock sentence-transformers modules only (nothing for ``trust_remote_code`` to run):

* bag-of-embeddings encoder, e(x) = P · (Σ_i w(t_i) E[t_i]) / Σ_i w(t_i) (:mod:`xdex.encoders.bag`):

  - ``StaticEmbedding`` (an ``nn.EmbeddingBag`` mean over the ids of a ``tokenizers`` tokenizer read without
    special tokens and truncated to the encoder's ``max_length``) holding the rows w(t)·E[t]. Its mean divides by
    the number of tokens n instead of Σ w(t), a positive factor per text, so this form is used where the tower
    normalises right after the (bias-free) projection P, or where the weights are all 1 (``weighting: none``);
  - otherwise (token weights followed by a layer that a scale changes, e.g. UniDEC's DE head) the exact weighted
    mean: ``WordEmbeddings`` (the same tokenizer, no special tokens, ``max_seq_length`` = ``max_length``) +
    ``WordWeights`` (w(t), by token) + ``Pooling`` (mean, divided by Σ w(t));

  then P, where the table is narrower or wider than the encoder's output, as a ``Dense`` without bias or activation;
* transformer encoder: ``Transformer`` (the model and the tokenizer pipeline xdex reads, special tokens included,
  truncated to ``max_length``) + ``Pooling`` (mean over the attention mask, or the first token);
* the network's layers after the encoder: ``Dense`` (UniDEC's heads: Linear + Tanh for Φ_D, Linear for Φ_C) and
  ``Normalize``.

Towers (:data:`TOWERS`): ``query`` embeds texts as the network embeds queries in a search mode
(``DualEncoderModel.embed_texts``); ``label`` embeds them as the network embeds a label added by its text after
training (``new_label_vectors``). Which networks can be exported, and in which modes, :func:`network_layers` says; a
part that stock modules cannot express (UniDEC's ``concat`` mode, OAK's linker and augmentation, a network type
registered by a plug-in) is refused by name rather than exported to embed differently.

The folder is written next to ``OUT`` under a temporary name, loaded back with sentence-transformers and checked to
embed a few texts as xdex does (cosine >= :data:`CHECK_COSINE`), then renamed to ``OUT``; an existing ``OUT`` is
never replaced. ``xdex-export.json`` in it records what was exported. It loads offline (``HF_HUB_OFFLINE=1``):
every file it needs is in it. Needs the optional ``sentence-transformers`` package (the ``export`` extra).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import xdex
from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.base import Encoder
from xdex.encoders.transformer import Transformer, _quiet
from xdex.inference.model import DualEncoderModel
from xdex.jsonfile import write_json
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.fusion import ClassifierFusionNet
from xdex.modules.network import Network
from xdex.modules.oak import OakNet
from xdex.modules.unidec import UniDECNet

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

FORMATS = ("sentence-transformers",)
TOWERS = ("query", "label")
CHECK_COSINE = 0.9999  # the least cosine between xdex's and the exported folder's vectors of the check texts
CHECK_TEXTS = ("", "a short text", "Another text, with UPPER case and punctuation!", "unseenword xqzv " * 80)
PROVENANCE = "xdex-export.json"  # what was exported: xdex version, network, encoder, tower, search mode, dimension
CHECK_LABELS = 16  # label texts of the model checked too
_TOKENIZER_FILE = "tokenizer.json"


@contextlib.contextmanager
def _library_warnings_only() -> Iterator[None]:
    """Keep sentence-transformers' info messages (saving, loading, module details) out of xdex's log."""
    logger = logging.getLogger("sentence_transformers")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _float32(encoder: Encoder) -> Iterator[None]:
    """A transformer encoder set to ``bf16`` computes in float32 for the duration."""
    if not isinstance(encoder, Transformer) or not encoder.bf16:
        yield
        return
    encoder.bf16 = False
    try:
        yield
    finally:
        encoder.bf16 = True


class UnsupportedModel(ValueError):
    """The model (a part of its network, or a search mode) cannot be expressed by stock sentence-transformers
    modules."""


@dataclass(frozen=True)
class _Linear:
    """A layer after the encoder: ``activation(W x + b)`` (``b`` may be None; ``activation`` a ``torch.nn`` class)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: type[nn.Module]


_NORMALIZE = "normalize"
_Layer = _Linear | str


def network_layers(net: Network, tower: str = "query", search: str | None = None) -> list[_Layer]:
    """The layers a network applies to its encoder's output in one tower, for search mode ``search`` (default: the
    network's own): linear layers and ``"normalize"``. Refuses (:class:`UnsupportedModel`) what stock modules
    cannot express."""
    if tower not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(TOWERS)}, got {tower!r}")
    mode = net.search if search is None else search
    if mode not in net.search_modes:
        raise ValueError(f"search mode {mode!r} is not one of this network's: {', '.join(net.search_modes)}")
    kind = type(net)
    if kind is OakNet:
        if tower == "label" or mode == "encoder":  # N(E(x)): no linker, no augmentation
            return [_NORMALIZE]
        raise UnsupportedModel(
            f"an OAK network's query tower in search mode {mode!r} links each text to knowledge pieces with its "
            "linker model and mixes them in with its augmentation block, which stock sentence-transformers modules "
            "cannot express; export --search encoder (queries as N(E(x)), without augmentation) or --tower label")
    if kind in (DualEncoder, ClassifierFusionNet):  # queries and label texts: N(E(x)) in every mode
        return [_NORMALIZE]
    if kind is UniDECNet:
        assert isinstance(net, UniDECNet)
        if mode == "concat":  # labels added by text get the query vectors too, in every mode
            raise UnsupportedModel(
                "UniDEC's search mode 'concat' joins two separately normalised heads, Φ_D(x) ⊕ N(Φ_C(x)), which stock "
                "sentence-transformers modules cannot express; export one head: --search de or --search clf")
        head = net.de_head if mode == "de" else net.clf_head
        linear = None if head is None else next(m for m in head.modules() if isinstance(m, nn.Linear))
        assert linear is not None  # the search setter checked that "clf" has its head
        activation = nn.Tanh if mode == "de" else nn.Identity
        return [_Linear(linear.weight.detach().float().cpu(), linear.bias.detach().float().cpu(), activation),
                _NORMALIZE]
    raise UnsupportedModel(f"the network type {net.kind!r} ({kind.__name__}) has no sentence-transformers export; "
                           "supported: dual_encoder, fusion, unidec (modes de, clf), oak (mode encoder, or the label "
                           "tower)")


def tower_modules(net: Network, tower: str = "query", search: str | None = None) -> list[nn.Module]:
    """The stock sentence-transformers modules that embed texts as ``net`` does in ``tower`` and mode ``search``."""
    modules = _st_modules()

    layers = network_layers(net, tower, search)
    encoder = net.encoder
    scale_free = bool(layers) and layers[0] == _NORMALIZE  # a positive factor per text changes nothing
    if isinstance(encoder, BagOfEmbeddings):
        out = _bag_modules(encoder, scale_free)
    elif isinstance(encoder, Transformer):
        out = _transformer_modules(encoder)
    else:
        raise UnsupportedModel(f"the encoder type {encoder.kind!r} has no sentence-transformers export; supported: "
                               "bag, transformer")
    for layer in layers:
        if layer == _NORMALIZE:
            out.append(modules.Normalize())
        else:
            assert isinstance(layer, _Linear)
            out.append(_dense(layer))
    return out


def _st_modules() -> Any:
    """sentence-transformers' module classes (``sentence_transformers.models`` before version 6)."""
    for name in ("sentence_transformers.sentence_transformer.modules", "sentence_transformers.models"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("exporting needs the 'sentence-transformers' package (the 'export' extra)")


def _dense(layer: _Linear) -> nn.Module:
    rows, cols = layer.weight.shape
    dense = _st_modules().Dense(cols, rows, bias=layer.bias is not None, activation_function=layer.activation())
    with torch.no_grad():
        dense.linear.weight.copy_(layer.weight)
        if layer.bias is not None:
            dense.linear.bias.copy_(layer.bias)
    return dense


def _backend_tokenizer(encoder: Encoder) -> Any:
    """A ``tokenizers.Tokenizer`` with the encoder's tokenisation pipeline (read back from the file xdex writes)."""
    import tokenizers

    with tempfile.TemporaryDirectory(prefix="xdex-export-") as tmp:
        encoder.tokenizer.save(tmp)
        return tokenizers.Tokenizer.from_file(str(Path(tmp) / _TOKENIZER_FILE))


def _bag_modules(encoder: BagOfEmbeddings, scale_free: bool) -> list[nn.Module]:
    modules = _st_modules()

    table = encoder.embedding.weight.detach().float().cpu()
    rows = table.shape[0]
    ids = torch.arange(rows)
    weights = encoder.token_weights(ids)
    weights = None if weights is None else weights.detach().float().cpu()
    backend = _backend_tokenizer(encoder)
    backend.no_padding()
    out: list[nn.Module]
    if weights is None or scale_free:
        # ids without special tokens, truncated to max_length: the truncation is saved in tokenizer.json
        backend.enable_truncation(encoder.max_length)
        folded = table if weights is None else table * weights.unsqueeze(1)
        out = [modules.StaticEmbedding(backend, embedding_weights=folded.clone())]
    else:
        from transformers import PreTrainedTokenizerFast

        backend.no_truncation()  # WordEmbeddings truncates to its max_seq_length
        backend.post_processor = None  # WordEmbeddings' tokenizer call adds special tokens; the bag reads none
        fast = PreTrainedTokenizerFast(tokenizer_object=backend)
        vocab = [encoder.tokenizer.id_to_token(i) or f"[xdex-row-{i}]" for i in range(rows)]
        if len(set(vocab)) != rows:
            raise UnsupportedModel("the tokenizer's vocabulary does not name every row of the embedding table once")
        out = [
            modules.WordEmbeddings(fast, table.clone(), max_seq_length=encoder.max_length),
            modules.WordWeights(vocab, dict(zip(vocab, weights.tolist(), strict=True)), unknown_word_weight=1.0),
            modules.Pooling(table.shape[1], pooling_mode="mean"),
        ]
    if encoder.projection is not None:
        weight = encoder.projection.weight.detach().float().cpu()
        out.append(_dense(_Linear(weight, None, nn.Identity)))
    return out


def _transformer_modules(encoder: Transformer) -> list[nn.Module]:
    modules = _st_modules()
    from transformers import PreTrainedTokenizerFast

    if encoder.tokenizer.pad_token is None:
        raise UnsupportedModel("the transformer encoder's tokenizer names no pad token, which sentence-transformers "
                               "needs to pad a batch")
    with tempfile.TemporaryDirectory(prefix="xdex-export-") as tmp:
        encoder.save(tmp)  # the Hugging Face model files and xdex's tokenizer
        with _quiet():
            module = modules.Transformer(tmp, max_seq_length=encoder.max_length)
        module.model.float()
    # the tokenizer pipeline xdex reads (normalisation, special tokens), whatever class the model type suggests
    fast = PreTrainedTokenizerFast(tokenizer_object=_backend_tokenizer(encoder), pad_token=encoder.tokenizer.pad_token)
    if "processor" in vars(module):  # sentence-transformers 6 calls the tokenizer the processor
        module.processor = fast
    else:
        module.tokenizer = fast
    module.max_seq_length = encoder.max_length
    pooling = modules.Pooling(encoder.dim, pooling_mode="cls" if encoder.pooling == "cls" else "mean")
    return [module, pooling]


def build_sentence_transformer(net: Network, tower: str = "query", search: str | None = None) -> SentenceTransformer:
    """A ``SentenceTransformer`` (on the CPU, in memory) that embeds texts as ``net`` does in ``tower``."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ImportError("exporting needs the 'sentence-transformers' package (the 'export' extra)") from e
    return SentenceTransformer(modules=tower_modules(net, tower, search), device="cpu", similarity_fn_name="cosine")


def xdex_vectors(net: Network, texts: list[str], tower: str = "query", search: str | None = None) -> np.ndarray:
    """How xdex itself embeds ``texts`` in ``tower`` and mode ``search`` (the reference the export is checked
    against): the network's query vectors (``text_vectors``), or its vectors of labels added by text."""
    if search is not None and search != net.search:
        previous = net.search
        net.search = search  # every network's search mode is settable
        try:
            return xdex_vectors(net, texts, tower)
        finally:
            net.search = previous
    if tower == "label":
        return net.new_label_vectors(net.encoder.tokenize(texts)).numpy()
    return net.text_vectors(texts).numpy()


def export_sentence_transformers(net: Network, out: str | Path, *, tower: str = "query", search: str | None = None,
                                 check_texts: list[str] | None = None) -> Path:
    """Write ``net``'s ``tower`` (in search mode ``search``) as a sentence-transformers folder ``out``, which must not
    exist; checked before it is renamed into place to embed ``check_texts`` (default: a few texts of every kind) as
    xdex does. Returns ``out``."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise FileExistsError(f"{out} already exists; export into a new folder")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such folder")
    net.eval()
    with _library_warnings_only():
        model = build_sentence_transformer(net, tower, search)
    texts = list(CHECK_TEXTS if check_texts is None else check_texts)
    with _float32(net.encoder):  # the exported folder computes in float32
        expected = xdex_vectors(net, texts, tower, search)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        with _quiet(), _library_warnings_only():
            model.save(str(staging))
            check_export(staging, expected, texts)
        write_json(staging / PROVENANCE, {
            "xdex_version": xdex.__version__, "network": net.kind, "encoder": net.encoder.kind, "tower": tower,
            "search": net.search if search is None else search, "dim": int(expected.shape[1]),
        })
        if out.exists() or out.is_symlink():
            raise FileExistsError(f"{out} appeared while exporting; export into a new folder")
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("exported the %s tower (%s, search mode %s) to %s", tower, net.kind, search or net.search, out)
    return out


def export_model(model_dir: str | Path, out: str | Path, *, fmt: str = "sentence-transformers",
                 tower: str = "query", search: str | None = None) -> Path:
    """Export the model directory ``model_dir`` (:func:`export_sentence_transformers`), checked on a few texts of
    every kind and on its first label texts. ``search``: a mode of the model's network (``de``, ``clf``, ...); the
    ranking stage, if the model has one, is not part of the export (it ranks labels, it does not embed texts)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if tower not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(TOWERS)}, got {tower!r}")
    out = Path(out)
    if out.exists() or out.is_symlink():  # before loading the model
        raise FileExistsError(f"{out} already exists; export into a new folder")
    model = DualEncoderModel.load(model_dir)
    texts = [*CHECK_TEXTS, *model.label_texts[:CHECK_LABELS]]
    return export_sentence_transformers(model.net, out, tower=tower, search=search, check_texts=texts)


def check_export(folder: Path, expected: np.ndarray, texts: list[str]) -> None:
    """Load ``folder`` as sentence-transformers does (offline, no custom code) and check that it embeds ``texts`` as
    ``expected`` (cosine >= :data:`CHECK_COSINE`, and equal norms)."""
    from sentence_transformers import SentenceTransformer

    got = SentenceTransformer(str(folder), device="cpu", local_files_only=True).encode(
        texts, convert_to_tensor=True, batch_size=len(texts) or 1, show_progress_bar=False)
    want = torch.as_tensor(expected, dtype=torch.float32)
    got = got.float().cpu().reshape(want.shape) if got.numel() == want.numel() else got
    if got.shape != want.shape:
        raise RuntimeError(f"the exported folder gives vectors of shape {tuple(got.shape)}, xdex {tuple(want.shape)}")
    norms = want.norm(dim=1), got.norm(dim=1)
    cosine = torch.where((norms[0] > 0) & (norms[1] > 0), F.cosine_similarity(got, want, dim=1),
                         torch.where(norms[0] == norms[1], 1.0, 0.0))
    if float(cosine.min()) < CHECK_COSINE or not torch.allclose(*norms, rtol=1e-3, atol=1e-6):
        worst = int(cosine.argmin())
        raise RuntimeError(f"the exported folder embeds {texts[worst]!r} differently from xdex (cosine "
                           f"{float(cosine[worst]):.6f}); nothing was written")
