import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from xdex.encoders.factory import build_encoder
from xdex.modules.fusion import ClassifierFusionNet

CORPUS = ["red apple pie", "green apple tart", "blue berry jam", "black berry wine", "apple", "berry"] * 2
# classifiers W and label embeddings Z of two labels in two dimensions
W = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
Z = torch.tensor([[0.0, 1.0], [1.0, 0.0]])


@pytest.fixture(scope="module")
def encoder():
    return build_encoder({"type": "bag", "dim": 2, "vocab_size": 60, "weighting": "none", "seed": 3}, CORPUS)


def _net(encoder, alpha: float = 0.25, search: str = "fused") -> ClassifierFusionNet:
    return ClassifierFusionNet(encoder, Z, W, alpha, search)


def test_label_vectors_by_mode_are_the_fused_stored_or_classifier_tables(encoder):
    net = _net(encoder)
    labels = encoder.tokenize(["apple", "berry"])
    # α = 0.25: v_0 = 0.25·(1, 0) + 0.75·(0, 1), v_1 = 0.25·(0, 2) + 0.75·(1, 0)
    assert torch.allclose(net.label_vectors(labels), torch.tensor([[0.25, 0.75], [0.75, 0.5]]))
    net.search = "de"
    assert torch.equal(net.label_vectors(labels), Z)
    net.search = "clf"
    assert torch.equal(net.label_vectors(labels), W)
    with pytest.raises(ValueError, match="3 label texts for 2 stored labels"):
        net.label_vectors(encoder.tokenize(["apple", "berry", "pie"]))


def test_fused_score_is_the_weighted_sum_of_classifier_and_label_scores(encoder):
    net = _net(encoder)
    tokens = encoder.tokenize(["red apple pie", "black berry wine"])
    q = net.query_vectors(tokens)
    assert torch.allclose(q, F.normalize(encoder.embed(tokens), dim=-1))
    assert torch.allclose(q.norm(dim=1), torch.ones(2))
    scores = q @ net.label_vectors(encoder.tokenize(["apple", "berry"])).T
    for i in range(2):
        x0, x1 = q[i].tolist()
        # α·wᵀx + (1 − α)·zᵀx with w_0 = (1, 0), z_0 = (0, 1), w_1 = (0, 2), z_1 = (1, 0)
        assert scores[i, 0].item() == pytest.approx(0.25 * x0 + 0.75 * x1, abs=1e-6)
        assert scores[i, 1].item() == pytest.approx(0.25 * 2 * x1 + 0.75 * x0, abs=1e-6)


def test_save_load_round_trip(encoder, tmp_path):
    net = _net(encoder, alpha=0.7, search="clf")
    net.save(tmp_path)
    config = json.loads((tmp_path / "heads.json").read_text())
    assert config == {"type": "fusion", "alpha": 0.7, "search": "clf", "n_labels": 2, "dim": 2}
    loaded = ClassifierFusionNet.load(tmp_path)
    assert (loaded.alpha, loaded.search) == (0.7, "clf")
    assert torch.equal(loaded.classifiers, W) and torch.equal(loaded.label_embeddings, Z)
    tokens = encoder.tokenize(CORPUS[:4])
    assert torch.equal(loaded.query_vectors(tokens), net.query_vectors(tokens))
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_bad_settings_are_rejected(encoder):
    with pytest.raises(ValueError, match="search mode must be one of fused, de, clf, got 'concat'"):
        _net(encoder, search="concat")
    net = _net(encoder)
    with pytest.raises(ValueError, match="search mode must be one of"):
        net.search = "both"
    assert net.search == "fused"
    with pytest.raises(ValueError, match="alpha must be in \\[0, 1\\]"):
        _net(encoder, alpha=1.5)
    with pytest.raises(ValueError, match="must both be \\[L, 2\\]"):
        ClassifierFusionNet(encoder, Z, W[:1], 0.5)
    with pytest.raises(ValueError, match="must both be \\[L, 2\\]"):
        ClassifierFusionNet(encoder, torch.ones(2, 3), torch.ones(2, 3), 0.5)


def test_damaged_files_give_clear_errors(encoder, tmp_path):
    _net(encoder).save(tmp_path)
    config_path, weights_path = tmp_path / "heads.json", tmp_path / "heads.safetensors"
    config = config_path.read_text()

    config_path.write_text('{"type": "fusion", "alpha": ')
    with pytest.raises(ValueError, match="heads.json:1: invalid JSON"):
        ClassifierFusionNet.load(tmp_path)
    config_path.write_text(config.replace('"fusion"', '"unidec"'))
    with pytest.raises(ValueError, match="heads.json: expected a JSON object with type 'fusion'"):
        ClassifierFusionNet.load(tmp_path)
    config_path.write_text(config.replace('"n_labels": 2', '"n_labels": 3'))
    with pytest.raises(ValueError, match=r"table label_embeddings has shape \(2, 2\).*says \(3, 2\)"):
        ClassifierFusionNet.load(tmp_path)
    config_path.write_text(config.replace('"alpha"', '"weight"'))
    with pytest.raises(ValueError, match="heads.json: missing or malformed setting"):
        ClassifierFusionNet.load(tmp_path)
    config_path.write_text(config.replace('"search": "fused"', '"search": "sum"'))
    with pytest.raises(ValueError, match="fusion heads are inconsistent .*search mode"):
        ClassifierFusionNet.load(tmp_path)

    config_path.write_text(config)
    save_file({"classifiers": W}, str(weights_path))
    with pytest.raises(ValueError, match="heads.safetensors: missing table\\(s\\) label_embeddings"):
        ClassifierFusionNet.load(tmp_path)
    weights_path.write_bytes(weights_path.read_bytes()[:20])
    with pytest.raises(ValueError, match="heads.safetensors: damaged safetensors file"):
        ClassifierFusionNet.load(tmp_path)
    weights_path.unlink()
    with pytest.raises(FileNotFoundError, match="no heads.safetensors"):
        ClassifierFusionNet.load(tmp_path)


def test_head_scores_are_each_table_s_share_of_the_fused_score(encoder):
    net = _net(encoder)
    q = net.query_vectors(encoder.tokenize(["red apple pie", "black berry wine"])).numpy()
    fused = net.label_vectors(encoder.tokenize(["apple", "berry"])).numpy()
    new = np.array([[0.6, 0.8]], np.float32)  # a label added after training: one vector for both heads
    ids = np.array([[0, 1, 2], [1, 2, 0]])
    vectors = np.concatenate([fused, new])[ids]
    heads = net.head_scores(q, ids, vectors)
    assert heads.shape == (2, 3, 2)
    np.testing.assert_allclose(heads[..., 0], np.einsum("ncd,nd->nc", np.concatenate([Z.numpy(), new])[ids], q),
                               rtol=1e-6)
    np.testing.assert_allclose(heads[..., 1], np.einsum("ncd,nd->nc", np.concatenate([W.numpy(), new])[ids], q),
                               rtol=1e-6)
    # the search score α·w_lᵀx + (1 − α)·E(z_l)ᵀx, α = 0.25, for every label (an added one too)
    np.testing.assert_allclose(0.75 * heads[..., 0] + 0.25 * heads[..., 1], np.einsum("ncd,nd->nc", vectors, q),
                               rtol=1e-5, atol=1e-6)
    net.search = "de"
    assert net.head_scores(q, ids, vectors) is None
