import pytest
import torch
import torch.nn.functional as F

from xdex.encoders import Transformer, load_encoder
from xdex.text import Tokenizer

transformers = pytest.importorskip("transformers")

CORPUS = ["the cat sat on the mat", "a dog ate the hat", "cats and dogs sit", "hats mats bats rats"] * 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny randomly initialised BERT with a WordPiece vocabulary trained on CORPUS."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = Tokenizer.train_wordpiece(CORPUS, 80)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(str(folder))
    tokenizer.save(folder)
    return folder


def test_mean_pooling_ignores_padding(model_dir):
    encoder = Transformer(model_dir).eval()
    short, long = "the cat", "a dog ate the hat on the mat"
    alone = encoder(encoder.tokenize([short]))
    padded = encoder(encoder.tokenize([short, long]))
    assert encoder.tokenize([short, long]).lengths.tolist() == [4, 10]  # [CLS] the cat [SEP] is padded by 6
    assert torch.allclose(alone[0], padded[0], atol=1e-5)


def test_mean_pooling_is_the_masked_mean_of_hidden_states(model_dir):
    encoder = Transformer(model_dir).eval()
    tokens = encoder.tokenize(["the cat sat"])
    hidden = encoder.model(input_ids=torch.from_numpy(tokens.ids[None].astype("int64"))).last_hidden_state[0]
    assert torch.allclose(encoder(tokens)[0], hidden.mean(0), atol=1e-6)


def test_cls_pooling_takes_the_first_state(model_dir):
    encoder = Transformer(model_dir, pooling="cls").eval()
    tokens = encoder.tokenize(["dogs sit", "the hat"])
    assert tokens.row(0)[0] == encoder.tokenizer.token_to_id("[CLS]")
    hidden = encoder.model(input_ids=torch.from_numpy(tokens.row(0)[None].astype("int64"))).last_hidden_state
    assert torch.allclose(encoder(tokens)[0], hidden[0, 0], atol=1e-6)


def test_save_load_round_trip(model_dir, tmp_path):
    encoder = Transformer(model_dir, pooling="cls", max_length=12, bf16=False).eval()
    with torch.no_grad():
        encoder.model.embeddings.word_embeddings.weight.mul_(1.5)  # differ from the source folder
    encoder.save(tmp_path / "enc")
    back = load_encoder(tmp_path / "enc").eval()
    assert isinstance(back, Transformer)
    assert (back.pooling, back.max_length, back.bf16, back.dim) == ("cls", 12, False, 32)
    tokens = encoder.tokenize(CORPUS[:4])
    assert torch.allclose(back(tokens), encoder(tokens), atol=1e-6)
    assert not [p for p in (tmp_path / "enc").iterdir() if p.name.startswith(".")]


def test_bf16_autocast_is_close_to_fp32(model_dir):
    fp32, bf16 = Transformer(model_dir).eval(), Transformer(model_dir, bf16=True).eval()
    tokens = fp32.tokenize(CORPUS[:4])
    a, b = fp32(tokens), bf16(tokens)
    assert b.dtype == torch.float32
    assert not torch.equal(a, b)  # bf16 really ran
    assert F.cosine_similarity(a, b).min() > 0.99
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a caller's autocast is not switched off
        assert torch.equal(fp32(tokens), b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_autocast_on_a_gpu_is_close_to_fp32_on_the_cpu(model_dir):
    cpu = Transformer(model_dir).eval()
    gpu = Transformer(model_dir, bf16=True).eval().to("cuda")
    tokens = cpu.tokenize(CORPUS[:4])
    a, b = cpu(tokens), gpu(tokens)  # the encoder moves the ids to its device
    assert b.device.type == "cuda" and b.dtype == torch.float32
    assert F.cosine_similarity(a, b.cpu()).min() > 0.99
    b.sum().backward()  # the backward pass runs under the GPU's bf16 autocast too
    assert gpu.model.embeddings.word_embeddings.weight.grad is not None


def test_gradients_reach_the_model(model_dir):
    encoder = Transformer(model_dir)
    encoder(encoder.tokenize(CORPUS[:2])).sum().backward()
    assert encoder.model.embeddings.word_embeddings.weight.grad is not None


def test_bad_settings(model_dir, tmp_path):
    with pytest.raises(ValueError, match="max_length must be between 3 and 64"):
        Transformer(model_dir, max_length=65)
    with pytest.raises(ValueError, match="pooling must be one of"):
        Transformer(model_dir, pooling="max")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        Transformer(tmp_path / "missing")
    Tokenizer.load(model_dir).save(tmp_path / "tokenizer-only")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Transformer(tmp_path / "tokenizer-only")


def _input_widths(encoder):
    """Record the width (tokens per row) of every ``input_ids`` the model is given."""
    widths: list[int] = []
    encoder.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    return widths


def test_a_training_batch_is_padded_to_its_longest_text_not_to_max_length(model_dir):
    encoder = Transformer(model_dir, max_length=48).train()
    widths = _input_widths(encoder)
    tokens = encoder.tokenize(["the cat", "a dog ate the hat", "hats"])
    assert tokens.lengths.tolist() == [4, 7, 3]
    encoder(tokens).sum().backward()
    assert widths == [7]


def test_embedding_passes_pad_each_length_sorted_batch_to_its_longest_text(model_dir):
    encoder = Transformer(model_dir, max_length=48)
    widths = _input_widths(encoder)
    texts = ["a dog ate the hat on the mat", "cats", "the cat sat", "dogs sit", "hats mats bats rats", "the hat"]
    tokens = encoder.tokenize(texts)
    assert tokens.lengths.tolist() == [10, 3, 5, 4, 6, 4]
    out = encoder.embed(tokens, batch_size=2)
    assert widths == [4, 5, 10]  # lengths sorted: 3 4 | 4 5 | 6 10, not 48
    one_by_one = torch.cat([encoder.embed(tokens[[i]]) for i in range(len(texts))])
    assert torch.allclose(out, one_by_one, atol=1e-5)  # rows come back in the input order, padding ignored
