"""UniDECNet against UniDEC Sec. 3 / Appendix C by hand: Φ_D = N(tanh(W1 Φ + b1)), Φ_C = W2 Φ + b2, and the
Sec. 3.3 search, whose "concat" score is the sum of the DE and the classifier cosines."""

import math

import numpy as np
import pytest
import torch

from xdex.encoders import BagOfEmbeddings
from xdex.modules import UniDECNet, load_net
from xdex.text import Tokenizer

# Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 c=7; Φ(text) = plain mean of the token rows
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
TABLE = torch.tensor([[0.0, 0.0]] * 5 + [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
QUERIES = ["a", "a b"]  # Φ = [1, 0], [0.5, 0.5]
LABELS = ["a", "b", "c"]  # Φ = [1, 0], [0, 1], [1, 1]

W1, B1 = [[1.0, 0.0], [0.0, -1.0]], [0.0, 0.5]
W2, B2 = [[2.0, 0.0], [1.0, 3.0]], [0.5, -1.0]
PSI = [[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]]  # N(Ψ) = [0.6, 0.8], [1, 0], [0, -1]

T1, T5 = math.tanh(1.0), math.tanh(0.5)
N = math.hypot(T1, T5)
# Φ_D by hand: g1("a") = [tanh 1, tanh 0.5]; g1("a b") = [tanh 0.5, tanh 0] -> N = [1, 0];
# g1("b") = [0, -tanh 0.5] -> [0, -1]; g1("c") = [tanh 1, -tanh 0.5]
DE_QUERIES = [[T1 / N, T5 / N], [1.0, 0.0]]
DE_LABELS = [[T1 / N, T5 / N], [0.0, -1.0], [T1 / N, -T5 / N]]
# Φ_C by hand: W2 [1, 0] + b2 = [2.5, 0]; W2 [0.5, 0.5] + b2 = [1.5, 1]
CLF_QUERIES = [[2.5, 0.0], [1.5, 1.0]]
R = math.sqrt(1.5**2 + 1.0**2)
# cos(Φ_D(x), Φ_D(z_l)) and cos(Φ_C(x), Ψ_l), rows = queries, columns = labels
DE_COS = [[1.0, -T5 / N, (T1**2 - T5**2) / N**2], [T1 / N, 0.0, T1 / N]]
CLF_COS = [[0.6, 1.0, 0.0], [(1.5 * 0.6 + 1.0 * 0.8) / R, 1.5 / R, -1.0 / R]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return Tokenizer.from_pretrained_dir(folder)


def make_net(tokenizer, classifiers=True, dropout=0.0, search=None):
    encoder = BagOfEmbeddings(tokenizer, 2, weighting="none", embeddings=TABLE)
    net = UniDECNet(encoder, 2, 3 if classifiers else None, dropout=dropout,
                    search=search or ("concat" if classifiers else "de"))
    with torch.no_grad():
        net.de_head[0].weight.copy_(torch.tensor(W1))
        net.de_head[0].bias.copy_(torch.tensor(B1))
        if classifiers:
            net.clf_head[0].weight.copy_(torch.tensor(W2))
            net.clf_head[0].bias.copy_(torch.tensor(B2))
            net.classifier.weight.copy_(torch.tensor(PSI))
    return net


def tokens(net, texts):
    return net.encoder.tokenize(texts)


def test_de_head_gives_unit_rows_of_normalised_tanh_projection(tokenizer):
    net = make_net(tokenizer, dropout=0.5).eval()
    q = net.embed(tokens(net, QUERIES))
    torch.testing.assert_close(q, torch.tensor(DE_QUERIES))
    torch.testing.assert_close(q.norm(dim=1), torch.ones(2))
    torch.testing.assert_close(net(tokens(net, LABELS)).detach(), torch.tensor(DE_LABELS))


def test_classifier_head_is_affine_and_not_normalised(tokenizer):
    net = make_net(tokenizer, dropout=0.5).eval()
    phi = net.encoder(tokens(net, QUERIES))
    out = net.clf(phi).detach()
    torch.testing.assert_close(out, torch.tensor(CLF_QUERIES))
    assert out[0].norm().item() == pytest.approx(2.5)
    torch.testing.assert_close(net.classifiers(torch.tensor([2, 0])).detach(), torch.tensor([PSI[2], PSI[0]]))


def test_dropout_acts_in_train_mode_only(tokenizer):
    net = make_net(tokenizer, dropout=0.5)
    phi = torch.rand(400, 2, generator=torch.Generator().manual_seed(0)) + 0.1
    net.eval()
    clean = net.clf(phi).detach()
    assert torch.equal(net.clf(phi), net.clf(phi))
    net.train()
    torch.manual_seed(0)
    noisy = net.clf(phi).detach()
    # inverted dropout with p = 0.5: every entry is 0 or twice its clean value, and both occur
    dropped = noisy == 0
    torch.testing.assert_close(noisy[~dropped], 2 * clean[~dropped])
    assert 0.3 < dropped.float().mean().item() < 0.7
    assert not torch.allclose(net.de(phi), net.de(phi))
    # search vectors are computed without dropout, and the training mode is restored
    net.search = "concat"
    q = net.query_vectors(tokens(net, QUERIES))
    assert net.training
    assert torch.equal(q, make_net(tokenizer, dropout=0.5).eval().query_vectors(tokens(net, QUERIES)))


@pytest.mark.parametrize("mode, expected", [
    ("concat", [[d + c for d, c in zip(dr, cr, strict=False)] for dr, cr in zip(DE_COS, CLF_COS, strict=False)]),
    ("de", DE_COS),
    ("clf", CLF_COS),
])
def test_search_scores_are_the_sum_of_the_two_cosines_or_each_alone(tokenizer, mode, expected):
    net = make_net(tokenizer, search=mode)
    q = net.query_vectors(tokens(net, QUERIES))
    z = net.label_vectors(tokens(net, LABELS))
    assert q.shape[1] == z.shape[1] == (4 if mode == "concat" else 2)
    torch.testing.assert_close(q @ z.T, torch.tensor(expected))


def test_a_net_without_classifiers_searches_with_the_de_head_only(tokenizer):
    net = make_net(tokenizer, classifiers=False)
    assert not net.has_classifier and net.clf_head is None
    torch.testing.assert_close(net.query_vectors(tokens(net, QUERIES)) @ net.label_vectors(tokens(net, LABELS)).T,
                               torch.tensor(DE_COS))
    for mode in ("concat", "clf"):
        with pytest.raises(ValueError, match=f"search mode '{mode}' needs classifiers"):
            net.search = mode
        with pytest.raises(ValueError, match="needs classifiers"):
            UniDECNet(net.encoder, 2, None, search=mode)
    with pytest.raises(ValueError, match="no classifier head"):
        net.clf(torch.zeros(1, 2))
    with pytest.raises(ValueError, match="search mode must be one of concat, de, clf"):
        make_net(tokenizer).search = "sum"


def test_label_vectors_need_one_text_per_classifier(tokenizer):
    net = make_net(tokenizer)
    with pytest.raises(ValueError, match="2 label texts for 3 classifiers"):
        net.label_vectors(tokens(net, LABELS[:2]))


def test_bad_head_settings_are_refused(tokenizer):
    encoder = BagOfEmbeddings(tokenizer, 2, weighting="none", embeddings=TABLE)
    with pytest.raises(ValueError, match="dimension must be positive"):
        UniDECNet(encoder, 0)
    with pytest.raises(ValueError, match="dropout must be in"):
        UniDECNet(encoder, 2, dropout=1.0)


@pytest.mark.parametrize("classifiers", [True, False])
def test_save_load_round_trip_gives_identical_vectors(tokenizer, tmp_path, classifiers):
    net = make_net(tokenizer, classifiers=classifiers, dropout=0.25, search="clf" if classifiers else "de")
    net.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder", "heads.json", "heads.safetensors"]
    back = load_net(tmp_path)
    assert isinstance(back, UniDECNet)
    assert (back.dim, back.dropout, back.search, back.has_classifier) == (2, 0.25, net.search, classifiers)
    for mode in ("concat", "de", "clf") if classifiers else ("de",):
        net.search = back.search = mode
        assert torch.equal(back.query_vectors(tokens(back, QUERIES)), net.query_vectors(tokens(net, QUERIES)))
        assert torch.equal(back.label_vectors(tokens(back, LABELS)), net.label_vectors(tokens(net, LABELS)))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_heads_weights_file_gives_a_clear_error(tokenizer, tmp_path, damage):
    make_net(tokenizer).save(tmp_path)
    path = tmp_path / "heads.safetensors"
    data = path.read_bytes()
    path.write_bytes(b"not a safetensors file" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(ValueError, match=str(tmp_path)):
        UniDECNet.load(tmp_path)


def test_heads_that_do_not_match_their_config_give_a_clear_error(tokenizer, tmp_path):
    make_net(tokenizer).save(tmp_path / "clf")
    config = tmp_path / "clf" / "heads.json"
    config.write_text(config.read_text().replace('"n_labels": 3', '"n_labels": 5'))
    with pytest.raises(ValueError, match="heads are inconsistent"):
        UniDECNet.load(tmp_path / "clf")

    make_net(tokenizer, classifiers=False).save(tmp_path / "de")
    config = tmp_path / "de" / "heads.json"
    config.write_text(config.read_text().replace('"n_labels": null', '"n_labels": 3'))
    with pytest.raises(ValueError, match=r"do not match \(missing .*classifier.weight"):
        UniDECNet.load(tmp_path / "de")

    config.write_text("{\n  \"dim\": 2,\n")
    with pytest.raises(ValueError, match=r"heads.json:\d+: invalid JSON"):
        UniDECNet.load(tmp_path / "de")


def test_head_scores_split_the_concatenated_score_into_its_two_cosines(tokenizer):
    net = make_net(tokenizer)
    q = net.query_vectors(tokens(net, QUERIES)).numpy()
    z = net.label_vectors(tokens(net, LABELS)).numpy()
    ids = np.tile(np.arange(len(LABELS)), (len(QUERIES), 1))
    heads = net.head_scores(q, ids, z[ids])
    np.testing.assert_allclose(heads[..., 0], DE_COS, rtol=1e-5)
    np.testing.assert_allclose(heads[..., 1], CLF_COS, rtol=1e-5)
    net.search = "de"
    assert net.head_scores(q[:, :2], ids, z[ids][..., :2]) is None
