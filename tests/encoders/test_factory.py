import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from xdex.encoders import BagOfEmbeddings, build_encoder, idf_weights, load_encoder
from xdex.encoders.factory import BAG_DEFAULTS

CORPUS = ["the cat sat on the mat", "a dog ate the hat", "cats and dogs sit", "hats mats bats rats"] * 3


def test_bag_learns_vocabulary_and_idf_from_texts():
    encoder = build_encoder({"type": "bag", "dim": 8, "vocab_size": 60, "max_length": 6, "weighting": "idf"}, CORPUS)
    assert isinstance(encoder, BagOfEmbeddings)
    assert (encoder.dim, encoder.max_length, encoder.sparse, encoder.weighting) == (8, 6, True, "idf")
    assert encoder.tokenizer.vocab_size <= 60
    expected = idf_weights(encoder.tokenize(CORPUS), encoder.tokenizer.vocab_size)
    assert np.allclose(encoder.idf.numpy(), expected)


def test_settings_left_out_take_the_documented_defaults():
    encoder = build_encoder({"type": "bag"}, CORPUS)
    assert (encoder.dim, encoder.max_length, encoder.sparse, encoder.weighting) == (256, 32, True, "learned")
    assert BAG_DEFAULTS == {"dim": 256, "vocab_size": 30_000, "weighting": "learned", "max_length": "auto",
                            "sparse": True}


def test_max_length_auto_follows_the_training_texts_lengths():
    words = [f"w{i}" for i in range(200)]
    short = [" ".join(words[i : i + 5]) for i in range(150)]
    long = [" ".join(words[(i + j) % 200] for j in range(50)) for i in range(100)]
    longer = [" ".join(words[(i + j) % 200] for j in range(300)) for i in range(20)]
    vocabulary = short + long + longer
    assert build_encoder({"type": "bag", "vocab_size": 400}, vocabulary, documents=short).max_length == 32  # floor
    encoder = build_encoder({"type": "bag", "vocab_size": 400}, vocabulary, documents=long)
    tokens = np.diff(encoder.tokenizer.tokenize(long, 10_000).offsets)
    assert 32 < encoder.max_length == int(np.ceil(np.quantile(tokens, 0.95) / 8) * 8) < 128
    assert build_encoder({"type": "bag", "vocab_size": 400}, vocabulary, documents=longer).max_length == 128  # cap
    with pytest.raises(ValueError, match="max_length must be a number of tokens or 'auto'"):
        build_encoder({"type": "bag", "max_length": "long"}, vocabulary)


def test_bag_is_seeded():
    config = {"type": "bag", "dim": 4, "vocab_size": 60, "weighting": "none", "seed": 7}
    a, b = build_encoder(config, CORPUS), build_encoder(config, CORPUS)
    assert torch.equal(a.embedding.weight, b.embedding.weight)


def test_bag_init_from_model_folder(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    save_file({"embeddings": torch.ones(7, 5)}, str(tmp_path / "model.safetensors"))
    encoder = build_encoder({"type": "bag", "init_from": str(tmp_path), "weighting": "learned"}, ["the cat", "cat"])
    assert encoder.dim == 5 and encoder.projection is None
    # learned weights start at ln idf: "cat" is in both texts, idf = ln(3/3) + 1 = 1
    assert encoder.log_weight.weight[6].item() == pytest.approx(0.0)
    assert build_encoder({"type": "bag", "init_from": str(tmp_path), "dim": 3, "weighting": "none"}).dim == 3
    with pytest.raises(ValueError, match="needs training texts to count document frequencies"):
        build_encoder({"type": "bag", "init_from": str(tmp_path), "weighting": "idf"})


def test_transformer_from_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    from xdex.text import Tokenizer

    tokenizer = Tokenizer.train_wordpiece(CORPUS, 60)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(str(tmp_path))
    tokenizer.save(tmp_path)
    encoder = build_encoder({"type": "transformer", "model_dir": str(tmp_path), "pooling": "cls", "max_length": 8})
    assert (encoder.dim, encoder.pooling, encoder.max_length) == (16, "cls", 8)


def test_saved_encoder_loads_by_type(tmp_path):
    encoder = build_encoder({"type": "bag", "dim": 4, "vocab_size": 60}, CORPUS)
    encoder.save(tmp_path)
    tokens = encoder.tokenize(CORPUS[:3])
    assert torch.equal(load_encoder(tmp_path)(tokens), encoder(tokens))
    (tmp_path / "encoder.json").write_text('{"type": "gru"}')
    with pytest.raises(ValueError, match="unknown encoder type 'gru'"):
        load_encoder(tmp_path)


@pytest.mark.parametrize(
    ("config", "texts", "message"),
    [
        ({"type": "gru"}, CORPUS, "type must be one of bag, transformer"),
        ({"type": "bag", "dim": 4, "size": 3}, CORPUS, "unknown key\\(s\\) size"),
        ({"type": "bag", "dim": 4, "weighting": "bm25"}, CORPUS, "weighting must be one of idf, learned, none"),
        ({"type": "bag", "dim": 4, "weighting": "none"}, None, "needs training texts for its vocabulary"),
        ({"type": "bag", "dim": 4, "weighting": "idf"}, None, "needs training texts to count document frequencies"),
        ({"type": "bag", "dim": 4}, None, "needs training texts for its vocabulary"),
        ({"type": "bag", "dim": 4, "tensor_name": "x"}, CORPUS, "only applies with init_from"),
        ({"type": "bag", "init_from": "/m", "vocab_size": 9}, CORPUS, "cannot be set with init_from"),
        ({"type": "transformer"}, None, "needs model_dir"),
    ],
)
def test_bad_configs(config, texts, message):
    with pytest.raises(ValueError, match=message):
        build_encoder(config, texts)
