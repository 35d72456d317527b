"""`xdex export --format sentence-transformers`: the exported folder, loaded by sentence-transformers alone, embeds
texts as xdex does (queries, and labels added by text) for every encoder and network it accepts; what stock
modules cannot express is refused by name, and nothing is written then or over an existing folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_runner import xdex_cli

import xdex
from xdex.encoders import BagOfEmbeddings, Transformer, idf_weights
from xdex.inference import export as ex
from xdex.inference.model import DualEncoderModel
from xdex.modules import Augmentation, DualEncoder, OakNet, UniDECNet
from xdex.text import Tokenizer

st = pytest.importorskip("sentence_transformers")

CORPUS = ["the cat sat on the mat", "a dog ate the hat", "cats and dogs sit", "hats mats bats rats"] * 3
ST = "sentence-transformers"


def probe_texts(net, extra=()) -> list[str]:
    """Texts of every kind: empty, blank, unknown words, upper case, longer than the encoder reads, and ``extra``."""
    long = " ".join(["the cat sat on the mat and a dog ate the hat"] * 20)
    texts = ["", "   ", "zxqv blorfing unseenword", "The CAT, the Hat!", long, "dogs", *extra]
    assert net.encoder.tokenize([long]).lengths[0] == net.encoder.max_length  # truncated by xdex
    assert len(net.encoder.tokenizer.tokenize([long], 10_000)) == 1
    return texts


def st_vectors(folder: Path, texts: list[str]) -> np.ndarray:
    model = st.SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return model.encode(texts, show_progress_bar=False)


def assert_same_vectors(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to rounding: cosine >= 0.9999 wherever a vector is non-zero, and close entries."""
    assert got.shape == want.shape
    norms = np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1)
    nonzero = norms[1] > 0
    np.testing.assert_allclose(norms[0], norms[1], atol=1e-5)
    cosine = (got * want).sum(1)[nonzero] / (norms[0] * norms[1])[nonzero]
    assert cosine.min() >= 0.9999
    np.testing.assert_allclose(got, want, atol=1e-5)


def module_types(folder: Path) -> list[str]:
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]


# ----------------------------------------------------------------------------------- trained model directories


@pytest.mark.parametrize(("name", "search", "modules"), [
    ("ngame", None, ["StaticEmbedding", "Normalize"]),  # learned token weights folded into the rows: scale-free
    ("dexa", None, ["StaticEmbedding", "Normalize"]),
    ("unidec", "de", ["WordEmbeddings", "WordWeights", "Pooling", "Dense", "Normalize"]),  # exact weighted mean
    ("unidec", "clf", ["WordEmbeddings", "WordWeights", "Pooling", "Dense", "Normalize"]),
])
def test_query_vectors_of_a_trained_model(trained, tmp_path, name, search, modules):
    model = DualEncoderModel.load(trained[name])
    out = ex.export_model(trained[name], tmp_path / "st", search=search)
    assert module_types(out) == modules
    texts = probe_texts(model.net, model.label_texts[:8])
    want = (model if search is None else model.with_search(search)).embed_texts(texts)
    assert_same_vectors(st_vectors(out, texts), want)
    assert np.linalg.norm(want[0]) == 0 or name == "unidec"  # a text without tokens: the zero vector, unless a bias
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]  # no temporary folder left
    assert json.loads((out / ex.PROVENANCE).read_text()) == {
        "xdex_version": xdex.__version__, "network": model.net.kind, "encoder": "bag", "tower": "query",
        "search": search or model.net.search, "dim": want.shape[1]}


@pytest.mark.parametrize(("name", "search"), [("ngame", None), ("unidec", "clf")])
def test_label_tower_embeds_as_labels_added_by_text(trained, tmp_path, name, search):
    model = DualEncoderModel.load(trained[name])
    if search is not None:
        model = model.with_search(search)
    out = ex.export_model(trained[name], tmp_path / "st", tower="label", search=search)
    texts = probe_texts(model.net, ["a label nobody trained", "Another NEW label"])[2:]  # labels are not blank
    added = model.with_labels(texts).added_vectors
    assert_same_vectors(st_vectors(out, texts), added)


def test_unidec_concat_is_refused_and_nothing_is_written(trained, tmp_path):
    assert DualEncoderModel.load(trained["unidec"]).net.search == "concat"
    with pytest.raises(ex.UnsupportedModel, match="'concat'.*cannot express.*--search de or --search clf"):
        ex.export_model(trained["unidec"], tmp_path / "st")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_never_replaced(trained, tmp_path):
    out = tmp_path / "st"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="already exists"):
        ex.export_model(trained["ngame"], out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    with pytest.raises(ValueError, match="format must be one of sentence-transformers"):
        ex.export_model(trained["ngame"], tmp_path / "new", fmt="onnx")
    with pytest.raises(ValueError, match="tower must be one of query, label"):
        ex.export_model(trained["ngame"], tmp_path / "new", tower="document")


def test_an_export_that_would_embed_differently_is_not_written(trained, tmp_path, monkeypatch):
    real = ex.xdex_vectors
    monkeypatch.setattr(ex, "xdex_vectors", lambda *a, **k: real(*a, **k)[:, ::-1].copy())  # another embedding
    with pytest.raises(RuntimeError, match="embeds .* differently from xdex.*nothing was written"):
        ex.export_model(trained["ngame"], tmp_path / "st")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_exports_and_explains_refusals(trained, tmp_path, monkeypatch, capsys):
    out = tmp_path / "st"
    code, stdout, err = xdex_cli(monkeypatch, capsys, "export", trained["unidec"], out, "--format", ST)
    assert code == 1 and "error: UniDEC's search mode 'concat'" in err and not out.exists()
    code, stdout, err = xdex_cli(monkeypatch, capsys, "export", trained["unidec"], out, "--format", ST,
                                 "--search", "de")
    assert code == 0 and f"wrote {out}" in stdout
    model = DualEncoderModel.load(trained["unidec"]).with_search("de")
    texts = probe_texts(model.net)
    assert_same_vectors(st_vectors(out, texts), model.embed_texts(texts))
    code, _, err = xdex_cli(monkeypatch, capsys, "export", trained["ngame"], out, "--format", ST)
    assert code == 1 and "already exists" in err
    code, _, err = xdex_cli(monkeypatch, capsys, "export", trained["ngame"], tmp_path / "x", "--format", "onnx")
    assert code == 1 and "format must be one of sentence-transformers" in err
    code, _, err = xdex_cli(monkeypatch, capsys, "export", tmp_path / "missing", tmp_path / "x", "--format", ST)
    assert code == 1 and "not an xdex model directory" in err


@pytest.mark.slow  # a fresh interpreter imports sentence-transformers: about 10-30 s
def test_the_folder_loads_offline_in_a_fresh_process(trained, tmp_path):
    out = ex.export_model(trained["ngame"], tmp_path / "st")
    model = DualEncoderModel.load(trained["ngame"])
    texts = probe_texts(model.net, model.label_texts[:4])
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = ("import json, sys, numpy as np; from sentence_transformers import SentenceTransformer; "
              "texts = json.load(open(sys.argv[2])); "
              "np.save(sys.argv[3], SentenceTransformer(sys.argv[1]).encode(texts, show_progress_bar=False))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    subprocess.run([sys.executable, "-c", script, str(out), str(tmp_path / "texts.json"), str(tmp_path / "v.npy")],
                   check=True, env=env, timeout=120)
    assert_same_vectors(np.load(tmp_path / "v.npy"), model.embed_texts(texts))


# ----------------------------------------------------------------------------------- networks built in memory


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train_wordpiece(CORPUS, 80)


def bag(tokenizer, weighting: str, width: int | None = None) -> BagOfEmbeddings:
    """A bag encoder of dimension 8 with random rows (of another ``width``: a projection) and token weights."""
    idf = idf_weights(tokenizer.tokenize(CORPUS, 16), tokenizer.vocab_size) if weighting != "none" else None
    generator = torch.Generator().manual_seed(1)
    table = None if width is None else torch.randn(tokenizer.vocab_size, width, generator=generator)
    encoder = BagOfEmbeddings(tokenizer, 8, weighting=weighting, idf=idf, max_length=6, embeddings=table, seed=2)
    if encoder.log_weight is not None:  # learned weights away from their start
        with torch.no_grad():
            encoder.log_weight.weight.add_(torch.randn(encoder.log_weight.weight.shape,
                                                       generator=torch.Generator().manual_seed(3)))
    return encoder.eval()


def unidec(encoder, search="de") -> UniDECNet:
    torch.manual_seed(4)
    return UniDECNet(encoder, 6, n_labels=5, search=search).eval()


@pytest.mark.parametrize("weighting", ["none", "idf", "learned"])
@pytest.mark.parametrize("width", [None, 12])
@pytest.mark.parametrize("network", ["dual_encoder", "unidec"])
def test_every_bag_form(tokenizer, tmp_path, weighting, width, network):
    encoder = bag(tokenizer, weighting, width)
    net = DualEncoder(encoder) if network == "dual_encoder" else unidec(encoder)
    out = ex.export_sentence_transformers(net, tmp_path / "st")
    types = module_types(out)
    exact_mean = weighting != "none" and network == "unidec"  # a scale-sensitive head after weighted tokens
    assert types[0] == ("WordEmbeddings" if exact_mean else "StaticEmbedding")
    assert ("Dense" in types) == (width is not None or network == "unidec")
    texts = probe_texts(net)
    assert_same_vectors(st_vectors(out, texts), net.text_vectors(texts).numpy())


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory, tokenizer):
    """A tiny randomly initialised BERT (as tests/encoders/test_transformer.py builds one)."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(str(folder))
    tokenizer.save(folder)
    return folder


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("network", ["dual_encoder", "unidec"])
def test_transformer_encoder(bert_dir, tmp_path, pooling, network):
    encoder = Transformer(bert_dir, pooling=pooling, max_length=10).eval()
    net = DualEncoder(encoder) if network == "dual_encoder" else unidec(encoder, "clf")
    out = ex.export_sentence_transformers(net, tmp_path / "st")
    assert module_types(out)[:2] == ["Transformer", "Pooling"]
    texts = probe_texts(net)
    assert_same_vectors(st_vectors(out, texts), net.text_vectors(texts).numpy())


def test_oak_exports_its_encoder_tower_and_refuses_the_augmented_one(tokenizer, tmp_path):
    encoder = bag(tokenizer, "learned")
    y = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
    net = OakNet(encoder, Augmentation(torch.randn(3, 8)), y, y, linker=None).eval()  # type: ignore[arg-type]
    with pytest.raises(ex.UnsupportedModel, match="linker.*augmentation.*--search encoder.*--tower label"):
        ex.export_sentence_transformers(net, tmp_path / "st")
    assert list(tmp_path.iterdir()) == []
    texts = probe_texts(net)
    out = ex.export_sentence_transformers(net, tmp_path / "label", tower="label")
    assert_same_vectors(st_vectors(out, texts), net.new_label_vectors(encoder.tokenize(texts)).numpy())
    out = ex.export_sentence_transformers(net, tmp_path / "encoder", search="encoder")
    net.search = "encoder"
    assert_same_vectors(st_vectors(out, texts), net.text_vectors(texts).numpy())


def test_a_network_of_a_plug_in_is_refused_by_name(tokenizer, tmp_path):
    class Custom(DualEncoder):
        kind = "custom"

    with pytest.raises(ex.UnsupportedModel, match="network type 'custom' \\(Custom\\) has no sentence-transformers"):
        ex.export_sentence_transformers(Custom(bag(tokenizer, "none")), tmp_path / "st")
    assert list(tmp_path.iterdir()) == []


def test_a_bf16_transformer_is_exported_in_float32(bert_dir, tmp_path):
    encoder = Transformer(bert_dir, max_length=10, bf16=True).eval()
    net = DualEncoder(encoder)
    out = ex.export_sentence_transformers(net, tmp_path / "st")
    assert encoder.bf16  # set back after the check
    texts = probe_texts(net)
    encoder.bf16 = False
    assert_same_vectors(st_vectors(out, texts), net.text_vectors(texts).numpy())
