import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from xdex.encoders import BagOfEmbeddings, idf_weights, load_encoder
from xdex.encoders import bag as bag_module
from xdex.text import TokenizedTexts, Tokenizer

# Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 c=7
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
TABLE = torch.tensor([[0.0, 0.0]] * 5 + [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
IDF = np.array([1, 1, 1, 1, 1, 1, 2, 4], dtype=np.float32)


@pytest.fixture
def tokenizer(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return Tokenizer.from_pretrained_dir(tmp_path)


def bag(tokenizer, weighting="idf", **kwargs):
    kwargs.setdefault("idf", IDF if weighting != "none" else None)
    return BagOfEmbeddings(tokenizer, 2, weighting=weighting, embeddings=TABLE, **kwargs)


def test_output_is_the_idf_weighted_mean(tokenizer):
    encoder = bag(tokenizer)
    out = encoder(encoder.tokenize(["a b b", "c", "a"]))
    # "a b b": (1*[1,0] + 2*[0,1] + 2*[0,1]) / (1 + 2 + 2) = [0.2, 0.8]
    expected = torch.tensor([[0.2, 0.8], [1.0, 1.0], [1.0, 0.0]])
    assert torch.allclose(out, expected)


def test_plain_mean_without_weights(tokenizer):
    encoder = bag(tokenizer, "none")
    out = encoder(encoder.tokenize(["a b b", "a c"]))
    assert torch.allclose(out, torch.tensor([[1 / 3, 2 / 3], [1.0, 0.5]]))


def test_learned_weights_start_at_idf_or_one(tokenizer):
    tokens = bag(tokenizer).tokenize(["a b b", "b c"])
    assert torch.allclose(bag(tokenizer, "learned")(tokens), bag(tokenizer)(tokens))
    assert torch.allclose(bag(tokenizer, "learned", idf=None)(tokens), bag(tokenizer, "none")(tokens))


def test_text_without_tokens_embeds_to_zero(tokenizer):
    encoder = bag(tokenizer)
    assert encoder(encoder.tokenize(["", "a"])).tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_idf_weights_by_hand():
    tokens = TokenizedTexts.from_arrays([np.array(ids, np.int32) for ids in ([5, 6], [5, 5], [7])])
    idf = idf_weights(tokens, 8)
    # N = 3; df(a=5) = 2, df(b=6) = df(c=7) = 1, others 0: idf = ln((1 + N) / (1 + df)) + 1
    assert idf[5] == pytest.approx(math.log(4 / 3) + 1)
    assert idf[6] == pytest.approx(math.log(2) + 1) and idf[7] == pytest.approx(math.log(2) + 1)
    assert idf[0] == pytest.approx(math.log(4) + 1)
    assert idf.dtype == np.float32


def test_projection_when_table_width_differs(tokenizer):
    encoder = BagOfEmbeddings(tokenizer, 3, weighting="none", embeddings=TABLE)
    assert encoder.dim == 3 and encoder.projection is not None
    out = encoder(encoder.tokenize(["a b"]))
    assert torch.allclose(out, encoder.projection.weight @ torch.tensor([0.5, 0.5]))


def test_sparse_gradients_flow_to_used_rows_only(tokenizer):
    encoder = bag(tokenizer, "learned", sparse=True)
    encoder(encoder.tokenize(["a b", "b"])).sum().backward()
    grad = encoder.embedding.weight.grad
    assert grad.is_sparse
    assert sorted(set(grad.coalesce().indices()[0].tolist())) == [5, 6]
    assert encoder.log_weight.weight.grad.is_sparse
    before = encoder.embedding.weight.detach().clone()
    opt = torch.optim.SparseAdam(list(encoder.parameters()), lr=0.1)
    opt.step()
    changed = (encoder.embedding.weight.detach() != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [5, 6]


def test_sparse_gradient_has_one_row_per_distinct_token_by_hand(tokenizer):
    encoder = bag(tokenizer, "none", sparse=True)
    # "a b b" = (E[a] + 2 E[b]) / 3 and "b" = E[b]: the sum of both outputs has gradient 1/3 on E[a]'s entries
    # and 2/3 + 1 = 5/3 on E[b]'s, in one row each although b occurs three times
    encoder(encoder.tokenize(["a b b", "", "b"])).sum().backward()
    grad = encoder.embedding.weight.grad
    assert grad._indices().tolist() == [[5, 6]]
    assert torch.allclose(grad._values(), torch.tensor([[1 / 3, 1 / 3], [5 / 3, 5 / 3]]))


TEXTS = ["a b b", "", "c c c a", "b", "", "a"]  # repeated tokens and empty texts


@pytest.mark.parametrize("weighting", ["idf", "learned", "none"])
@pytest.mark.parametrize("dim", [2, 3])  # 3: with a projection
def test_sparse_path_gives_the_tables_own_bag_and_its_gradients(tokenizer, weighting, dim):
    """The sparse path (distinct rows looked up once) against the table's own bag with dense gradients."""
    pair = [BagOfEmbeddings(tokenizer, dim, weighting=weighting, idf=IDF, embeddings=TABLE, sparse=sparse, seed=2)
            for sparse in (True, False)]
    if weighting == "learned":
        for encoder in pair:
            with torch.no_grad():
                encoder.log_weight.weight.copy_(torch.linspace(-1.0, 1.0, 8).unsqueeze(1))
    tokens = pair[0].tokenize(TEXTS)
    outputs = [encoder(tokens) for encoder in pair]
    assert torch.allclose(outputs[0], outputs[1], rtol=1e-6, atol=0.0)
    with torch.no_grad():
        assert torch.allclose(pair[0](tokens), outputs[0], rtol=1e-6, atol=0.0)  # the no-graph path: the table's bag
    target = torch.arange(outputs[0].numel(), dtype=torch.float32).reshape(outputs[0].shape)
    for out in outputs:
        (out * target).sum().backward()
    sparse, dense = (dict(encoder.named_parameters()) for encoder in pair)
    for name, param in sparse.items():
        grad = param.grad.to_dense() if param.grad.is_sparse else param.grad
        assert torch.allclose(grad, dense[name].grad, rtol=1e-6, atol=1e-7), name
    distinct = sorted({5, 6, 7})  # a, b, c
    assert sparse["embedding.weight"].grad.is_sparse
    assert sparse["embedding.weight"].grad._indices().tolist() == [distinct]
    if weighting == "learned":
        assert sparse["log_weight.weight"].grad._indices().tolist() == [distinct]
        assert bool((sparse["log_weight.weight"].grad._values() != 0).all())


def test_sparse_path_without_any_token(tokenizer):
    encoder = bag(tokenizer, "learned", sparse=True)
    out = encoder(encoder.tokenize(["", ""]))
    assert out.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    out.sum().backward()
    assert encoder.embedding.weight.grad._nnz() == 0
    assert encoder(encoder.tokenize([])).shape == (0, 2)


@pytest.mark.parametrize("weighting", ["idf", "learned", "none"])
def test_save_load_round_trip(tmp_path, tokenizer, weighting):
    encoder = BagOfEmbeddings(tokenizer, 3, weighting=weighting, idf=IDF, embeddings=TABLE, max_length=5, sparse=True)
    with torch.no_grad():
        encoder.embedding.weight.add_(0.25)
    encoder.save(tmp_path / "enc")
    back = load_encoder(tmp_path / "enc")
    assert isinstance(back, BagOfEmbeddings)
    assert (back.weighting, back.max_length, back.sparse, back.dim) == (weighting, 5, True, 3)
    tokens = encoder.tokenize(["a b c", "c c", "b"])
    assert torch.equal(back(tokens), encoder(tokens))
    assert back.tokenizer.fingerprint() == encoder.tokenizer.fingerprint()


def test_init_from_a_saved_embedding_matrix(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    matrix = torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4)
    save_file({"bert.embeddings.word_embeddings.weight": matrix, "bert.pooler.dense.weight": torch.eye(4)},
              str(folder / "model.safetensors"))
    encoder = BagOfEmbeddings.from_pretrained(folder, weighting="none")
    assert encoder.dim == 4 and encoder.projection is None
    assert torch.equal(encoder.embedding.weight.detach(), matrix)
    assert torch.allclose(encoder(encoder.tokenize(["a c"])), (matrix[5] + matrix[7]) / 2)
    projected = BagOfEmbeddings.from_pretrained(folder, 2, weighting="none")
    assert projected.dim == 2 and projected.projection.weight.shape == (2, 4)


def test_init_from_pytorch_weights_by_name(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    matrix = torch.ones(10, 3)  # more rows than the vocabulary is fine
    torch.save({"emb": matrix}, folder / "pytorch_model.bin")
    encoder = BagOfEmbeddings.from_pretrained(folder, tensor_name="emb", weighting="none")
    assert encoder.embedding.weight.shape == (10, 3)
    with pytest.raises(ValueError, match="no token-embedding matrix found"):
        BagOfEmbeddings.from_pretrained(folder, weighting="none")


def test_embed_keeps_input_order(tokenizer):
    encoder = bag(tokenizer)
    tokens = encoder.tokenize(["a b c", "c", "", "b b a"])
    assert torch.allclose(encoder.embed(tokens, batch_size=2), encoder(tokens))


@pytest.mark.parametrize(("weighting", "dim"), [("idf", 2), ("learned", 2), ("none", 2), ("idf", 3)])
def test_embed_computes_the_weighted_mean_of_forward_in_one_compiled_pass(tokenizer, weighting, dim):
    encoder = BagOfEmbeddings(tokenizer, dim, weighting=weighting, embeddings=TABLE,
                              idf=None if weighting == "none" else IDF)
    if encoder.log_weight is not None:
        encoder.log_weight.weight.data += torch.tensor([[0.1 * i] for i in range(8)])  # trained away from idf
    tokens = encoder.tokenize(["a b b", "c", "", "b a c a"])
    # "a b b" by hand with idf: (1*[1,0] + 2*[0,1] + 2*[0,1]) / 5
    with torch.no_grad():
        torch.testing.assert_close(encoder.embed(tokens), encoder(tokens), rtol=1e-6, atol=1e-7)
    if weighting == "idf" and dim == 2:
        torch.testing.assert_close(encoder.embed(tokens)[0], torch.tensor([0.2, 0.8]))
    assert encoder.embed(tokens)[2].tolist() == [0.0] * dim


def test_a_text_embeds_to_the_same_bits_alone_in_a_batch_and_in_a_pass_split_between_threads(tokenizer, monkeypatch):
    rng = np.random.default_rng(0)
    encoder = BagOfEmbeddings(tokenizer, 4, weighting="idf", idf=IDF, embeddings=rng.normal(size=(8, 4)))
    texts = [" ".join(rng.choice(["a", "b", "c"], size=rng.integers(0, 9))) for _ in range(300)]
    tokens = encoder.tokenize(texts)
    together = encoder.embed(tokens)
    alone = torch.cat([encoder.embed(encoder.tokenize([text])) for text in texts])
    assert torch.equal(together, alone)
    monkeypatch.setattr(bag_module, "TOKENS_PER_THREAD", 10)
    threads = torch.get_num_threads()
    try:
        for count in (2, 3):
            torch.set_num_threads(count)
            assert torch.equal(encoder.embed(tokens), together)
    finally:
        torch.set_num_threads(threads)


def test_token_ids_past_the_table_are_refused_by_embed(tokenizer):
    encoder = bag(tokenizer)
    tokens = TokenizedTexts.from_arrays([np.array([5, 8], np.int32)])
    with pytest.raises(IndexError, match="0..7"):
        encoder.embed(tokens)


def test_bad_settings(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="needs IDF weights"):
        BagOfEmbeddings(tokenizer, 2)
    with pytest.raises(ValueError, match="weighting must be one of"):
        BagOfEmbeddings(tokenizer, 2, weighting="tfidf")
    with pytest.raises(ValueError, match="needs 8 rows"):
        BagOfEmbeddings(tokenizer, 2, weighting="none", embeddings=torch.zeros(4, 2))
    with pytest.raises(ValueError, match="one weight per table row \\(8\\), got 3"):
        BagOfEmbeddings(tokenizer, 2, idf=np.ones(3))
    with pytest.raises(ValueError, match="must be positive"):
        BagOfEmbeddings(tokenizer, 2, idf=np.zeros(8))
    with pytest.raises(FileNotFoundError, match="no encoder.json"):
        BagOfEmbeddings.load(tmp_path)


@pytest.mark.parametrize("ids", [[5, 3, 5, 0, 9, 3, 3], [7], [], list(range(10))[::-1] * 3])
def test_distinct_ids_are_torch_unique_sorted_with_inverse(ids):
    ids = torch.tensor(ids, dtype=torch.int64)
    distinct, position = bag_module.distinct_ids(ids, 10)
    expected_distinct, expected_position = torch.unique(ids, sorted=True, return_inverse=True)
    assert torch.equal(distinct, expected_distinct) and torch.equal(position, expected_position)
    assert distinct.dtype == position.dtype == torch.int64


def test_distinct_ids_of_a_training_batch_equal_torch_unique():
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 30_000, 36_600))
    for got, expected in zip(bag_module.distinct_ids(ids, 30_000), torch.unique(ids, sorted=True, return_inverse=True),
                             strict=True):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("bad", [-1, 10])
def test_distinct_ids_refuse_ids_outside_the_vocabulary(bad):
    with pytest.raises(IndexError, match=r"token ids must lie in 0\.\.9"):
        bag_module.distinct_ids(torch.tensor([1, bad, 2]), 10)
