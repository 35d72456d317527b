"""OAK's augmentation block and network (OAK Sec. 4, Eq. 2, Sec. 4.2): the AK bank's sparse gradients, the
combiner's attention and pooling on hand cases, the re-scored search, and the saved network.

Notation: x the document embedding, 𝒦(a) an AKP's bank row, α the combiner's weights over the slots
[x, 𝒦(a_1), ..., 𝒦(a_K)], x̂ = N(x + W_o Σ α_s W_v s), y_j / w_j a label's embedding / classifier.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ranking_asserts import assert_same_ranking

from xdex.encoders.factory import build_encoder
from xdex.index import ExactIndex
from xdex.inference.model import DualEncoderModel
from xdex.inference.predictor import Predictor
from xdex.metrics.ranking import Ranking
from xdex.modules import DualEncoder, OakNet, load_net
from xdex.modules.oak import AKBank, Augmentation, Combiner, final_score, link, pad_links

A = math.exp(1 / math.sqrt(2))  # exp(q·k / √2) of a slot whose key matches the query, in the 2-d hand cases


def identity_combiner(pooling: str = "attention") -> Combiner:
    """A 2-d combiner with W_q = W_k = W_v = W_o = I and zero biases."""
    c = Combiner(2, pooling)
    with torch.no_grad():
        for layer in (c.query, c.key, c.value, c.out):
            layer.weight.copy_(torch.eye(2))
            layer.bias.zero_()
    return c


X = torch.tensor([[1.0, 0.0]])
AKPS = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])  # the third slot is padding (its values must not count)
MASK = torch.tensor([[True, True, False]])


# -- combiner ---------------------------------------------------------------------------------------------
def test_attention_weights_by_hand_sum_to_one_and_give_padding_exactly_zero():
    alpha = identity_combiner().weights(X, AKPS, MASK)
    # logits q·k_s/√2: document 1/√2, first AKP 1/√2, second AKP 0, padding -inf
    expected = torch.tensor([[A, A, 1.0, 0.0]]) / (2 * A + 1)  # = [0.4011, 0.4011, 0.1978, 0]
    torch.testing.assert_close(alpha, expected)
    assert alpha[0, 3].item() == 0.0
    assert alpha.sum().item() == pytest.approx(1.0)


def test_enriched_embedding_by_hand():
    x_hat = identity_combiner()(X, AKPS, MASK)
    # x + Σ α_s s = [1 + 0.4011 + 0.4011, 0.1978] = [1.8022, 0.1978], normalised
    torch.testing.assert_close(x_hat, torch.tensor([[0.99403243, 0.10908497]]))


def test_a_document_without_akps_attends_to_itself_alone():
    alpha = identity_combiner().weights(X, AKPS, torch.zeros(1, 3, dtype=torch.bool))
    assert alpha.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    # x̂ = N(x + W_o W_v x) = N(2x) = x
    torch.testing.assert_close(identity_combiner()(X, AKPS, torch.zeros(1, 3, dtype=torch.bool)), X)


def test_mean_pooling_gives_every_valid_slot_the_same_weight():
    alpha = identity_combiner("mean").weights(X, AKPS, MASK)
    torch.testing.assert_close(alpha, torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]]))
    # x + (x + e1 + e2)/3 = [5/3, 1/3], normalised
    torch.testing.assert_close(identity_combiner("mean")(X, AKPS, MASK), torch.tensor([[5.0, 1.0]]) / math.sqrt(26))


def test_a_fresh_combiner_returns_the_document_embedding():
    torch.manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    akps = torch.randn(4, 3, 8)
    torch.testing.assert_close(Combiner(8)(x, akps, torch.ones(4, 3, dtype=torch.bool)), x)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3), st.integers(1, 4), st.sampled_from(["attention", "mean"]))
def test_extra_padding_and_akp_order_do_not_change_the_enriched_embedding(n_akps, extra_pad, pooling):
    torch.manual_seed(n_akps)
    aug = Augmentation(torch.randn(5, 6), pooling)
    torch.nn.init.normal_(aug.combiner.out.weight)
    x = torch.nn.functional.normalize(torch.randn(1, 6), dim=-1)
    ids = torch.arange(n_akps).view(1, -1)
    base = aug(x, torch.cat([ids, torch.full((1, 1), -1)], dim=1))
    padded = aug(x, torch.cat([ids.flip(1), torch.full((1, extra_pad + 1), -1)], dim=1))
    torch.testing.assert_close(padded, base)
    alpha = aug.attention(x, torch.cat([ids, torch.full((1, extra_pad), -1)], dim=1))
    assert alpha[0, 1 + n_akps:].eq(0).all()
    assert alpha.sum().item() == pytest.approx(1.0)


# -- AK bank -----------------------------------------------------------------------------------------------
def test_pad_links_by_hand():
    links = sp.csr_matrix(np.array([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=np.float32))
    assert pad_links(links).tolist() == [[1, 3, -1], [-1, -1, -1], [0, 1, 2]]
    assert pad_links(links, np.array([1])).tolist() == [[-1]]


def test_the_bank_gets_sparse_gradient_rows_for_the_batchs_akps_only():
    torch.manual_seed(0)
    aug = Augmentation(torch.randn(6, 4))
    torch.nn.init.normal_(aug.combiner.out.weight)  # a trained W_o (it starts at zero)
    x = torch.nn.functional.normalize(torch.randn(2, 4), dim=-1)
    aug(x, torch.tensor([[4, -1], [1, 4]])).sum().backward()
    grad = aug.bank.table.weight.grad
    assert grad.is_sparse
    grad = grad.coalesce()
    assert sorted(grad.indices()[0].tolist()) == [1, 4]
    assert bool((grad.values().norm(dim=1) > 0).all())


def test_the_bank_starts_at_its_initial_table_and_rejects_unknown_ids():
    init = torch.randn(3, 4)
    bank = AKBank(init)
    rows, mask = bank(torch.tensor([[2, -1]]))
    torch.testing.assert_close(rows[0, 0], init[2])
    assert rows[0, 1].eq(0).all() and mask.tolist() == [[True, False]]
    with pytest.raises(ValueError, match="outside the bank of 3"):
        bank(torch.tensor([[3]]))


# -- the network --------------------------------------------------------------------------------------------
def test_final_score_by_hand_keeps_negative_factors_in_order():
    # (1 + sim)/2 · (1 + ann)/2
    assert final_score(torch.tensor(0.5), torch.tensor(0.1)).item() == pytest.approx(0.75 * 0.55)
    # two negative cosines multiply to 0.81 but must rank below two positive ones
    assert final_score(torch.tensor(-0.9), torch.tensor(-0.9)) < final_score(torch.tensor(0.2), torch.tensor(0.1))
    assert final_score(torch.tensor(-1.0), torch.tensor(1.0)).item() == 0.0


class FixedLinker:
    """A linker returning given AKP ids (best first) for every text."""

    def __init__(self, ids: list[int], scores: list[float]):
        self.ids, self.scores = ids, scores

    def predict(self, texts: list[str], k: int = 10) -> Ranking:
        n = len(texts)
        return Ranking(np.tile(np.array(self.ids[:k]), (n, 1)), np.tile(np.array(self.scores[:k]), (n, 1)))

    def save(self, folder) -> None:
        raise AssertionError("not saved in this test")


TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota", "kappa lambda mu"]


def small_net(linker, n_labels: int = 12, dim: int = 6, seed: int = 0, candidates: int = 100) -> OakNet:
    torch.manual_seed(seed)
    encoder = build_encoder({"type": "bag", "dim": dim, "vocab_size": 200, "weighting": "none"}, TEXTS)
    aug = Augmentation(torch.randn(4, dim))
    torch.nn.init.normal_(aug.combiner.out.weight)
    y = torch.nn.functional.normalize(torch.randn(n_labels, dim), dim=-1)
    w = y + 0.5 * torch.randn(n_labels, dim)
    return OakNet(encoder, aug, y, w, linker, top_k=2, candidates=candidates)


def test_link_drops_akps_below_the_threshold():
    assert link(FixedLinker([3, 1], [0.9, 0.2]), ["a", "b"], 2, threshold=0.5).tolist() == [[3, -1], [3, -1]]


def test_oak_search_is_the_top_k_of_the_final_score_over_all_labels():
    net = small_net(FixedLinker([2, 0], [0.9, 0.8]))
    index = ExactIndex(6, "ip")
    index.add(net.label_vectors(net.encoder.tokenize(["l"] * 12)).numpy())
    ranking = net.rank(TEXTS, index, 5)

    x = net.embed(net.encoder.tokenize(TEXTS))
    x_hat = net.augment(x, torch.tensor([[2, 0]] * 4)).detach()
    expected = final_score(x_hat @ net.label_embeddings.T,
                           x_hat @ torch.nn.functional.normalize(net.classifiers, dim=-1).T)
    best, ids = torch.topk(expected, 5, dim=1)
    assert ranking.indices.tolist() == ids.tolist()
    np.testing.assert_allclose(ranking.scores, best.numpy(), rtol=1e-5)


def test_other_search_modes_and_oracle_links():
    net = small_net(FixedLinker([2, 0], [0.9, 0.8]))
    y = net.label_embeddings
    index = ExactIndex(6, "ip")
    index.add(y.numpy())
    x = net.embed(net.encoder.tokenize(TEXTS))
    net.search = "de"
    oracle = sp.csr_matrix(np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 1, 0]], dtype=np.float32))
    for links, ids in ((None, torch.tensor([[2, 0]] * 4)), (oracle, pad_links(oracle))):
        ranking = net.rank(TEXTS, index, 3, links=links)
        assert ranking.indices.tolist() == torch.topk(net.augment(x, ids).detach() @ y.T, 3).indices.tolist()
    net.search = "encoder"
    assert net.rank(TEXTS, index, 3).indices.tolist() == torch.topk(x @ y.T, 3).indices.tolist()


def linker_model(tmp_path) -> DualEncoderModel:
    """A tiny real linker model directory over 4 AKPs."""
    akps = ["red", "green", "blue", "black"]
    torch.manual_seed(1)
    net = DualEncoder(build_encoder({"type": "bag", "dim": 6, "vocab_size": 200, "weighting": "none"}, TEXTS + akps))
    z = net.label_vectors(net.encoder.tokenize(akps)).numpy()
    index = ExactIndex(6, "ip")
    index.add(z)
    model = DualEncoderModel(net, [f"a{i}" for i in range(4)], akps, z, index, {}, {"method": "ngame"})
    model.save(tmp_path / "linker-source")
    return DualEncoderModel.load(tmp_path / "linker-source")


def test_the_model_directory_round_trip_predicts_the_same(tmp_path):
    net = small_net(linker_model(tmp_path))
    z = net.label_vectors(net.encoder.tokenize(["l"] * 12)).numpy()
    index = ExactIndex(6, "ip")
    index.add(z)
    model = DualEncoderModel(net, [f"l{j}" for j in range(12)], [f"label {j}" for j in range(12)], z, index,
                             {"method": "oak"}, {"method": "oak"})
    model.save(tmp_path / "model")

    loaded = load_net(tmp_path / "model", load_model=DualEncoderModel.load)
    assert isinstance(loaded, OakNet) and (tmp_path / "model" / "linker" / "meta.json").is_file()
    for name, tensor in loaded.augment.state_dict().items():
        torch.testing.assert_close(tensor, net.augment.state_dict()[name])
    again = DualEncoderModel.load(tmp_path / "model")
    expected = model.predict(TEXTS, 4)
    reloaded = again.predict(TEXTS, 4)
    assert_same_ranking(reloaded.indices, reloaded.scores, expected.indices, expected.scores)
    served = Predictor(tmp_path / "model").predict(TEXTS[:1], 4)[0]
    assert_same_ranking([[s.index for s in served]], [[s.score for s in served]], expected.indices[:1],
                        expected.scores[:1])
    de = again.with_search("de")
    assert de.predict(TEXTS, 2).indices.shape == (4, 2)


def test_a_damaged_heads_file_is_named(tmp_path):
    net = small_net(linker_model(tmp_path))
    net.save(tmp_path / "net")
    (tmp_path / "net" / "heads.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="heads.safetensors"):
        OakNet.load(tmp_path / "net", {"linker": FixedLinker([0], [1.0])})


def test_an_oak_network_is_not_loaded_without_its_linker(tmp_path):
    """A network never loads whole models: its linker is handed in by the model layer, or the load is refused."""
    net = small_net(linker_model(tmp_path))
    net.save(tmp_path / "net")
    with pytest.raises(ValueError, match="model directories of its own .*linker.*load the model directory"):
        load_net(tmp_path / "net")
    with pytest.raises(ValueError, match="needs its linker"):
        OakNet.load(tmp_path / "net")


def test_query_vectors_without_texts_are_refused():
    net = small_net(FixedLinker([0], [1.0]))
    with pytest.raises(ValueError, match="raw texts"):
        net.query_vectors(net.encoder.tokenize(TEXTS))


def test_a_network_written_by_xdex_0_1_0_still_loads(tmp_path):
    """xdex 0.1.0 recorded the AK bank's size as ``n_aux`` in heads.json; it is now ``n_akp``."""
    net = small_net(linker_model(tmp_path))
    net.save(tmp_path / "net")
    path = tmp_path / "net" / "heads.json"
    settings = json.loads(path.read_text())
    settings["n_aux"] = settings.pop("n_akp")
    path.write_text(json.dumps(settings))
    loaded = OakNet.load(tmp_path / "net", {"linker": FixedLinker([0], [1.0])})
    assert loaded.augment.bank.size == net.augment.bank.size


def test_head_scores_are_the_two_cosines_of_the_final_score():
    net = small_net(FixedLinker([2, 0], [0.9, 0.8]))
    q = net.text_vectors(TEXTS).numpy()
    vectors = net.label_vectors(net.encoder.tokenize(["l"] * 12)).numpy()  # N(w_j) in mode "oak"
    new = np.full((1, 6), 0.5, np.float32)  # a label added after training: y = w
    ids = np.array([[0, 5, 12]] * len(TEXTS))
    heads = net.head_scores(q, ids, np.concatenate([vectors, new])[ids])
    y = np.concatenate([net.label_embeddings.numpy(), new])
    np.testing.assert_allclose(heads[..., 0], q @ y[[0, 5, 12]].T, rtol=1e-5)
    np.testing.assert_allclose(heads[..., 1], q @ np.concatenate([vectors, new])[[0, 5, 12]].T, rtol=1e-5)
    index = ExactIndex(6, "ip")
    index.add(vectors)
    ranking = net.rank(TEXTS, index, 4)  # OAK's own ranking: final_score of the two cosines
    top = net.head_scores(q, ranking.indices, vectors[ranking.indices])
    np.testing.assert_allclose(final_score(torch.from_numpy(top[..., 0]), torch.from_numpy(top[..., 1])).numpy(),
                               ranking.scores, rtol=1e-5)


def test_the_linker_is_the_networks_one_part():
    linker = FixedLinker([0], [1.0])
    assert small_net(linker).parts() == {"linker": linker}
