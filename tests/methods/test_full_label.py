import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.factory import build_encoder
from xdex.losses import DecoupledSoftmax, SoftTopK, build_loss
from xdex.methods.full_label import FullLabelObjective, full_label_loss
from xdex.methods.objective import SamplingConfig
from xdex.modules.dual_encoder import DualEncoder
from xdex.train.grad_cache import encode_chunks, replay_chunks

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


class DropoutDualEncoder(DualEncoder):
    """A dual encoder with dropout on the encoder output, so that the gradient cache must replay the masks."""

    def __init__(self, encoder, p: float = 0.3):
        super().__init__(encoder)
        self.dropout = nn.Dropout(p)

    def forward(self, tokens):
        return F.normalize(self.dropout(self.encoder(tokens)), dim=-1)


def _data(n_queries=12, n_labels=23, seed=0):
    rng = np.random.default_rng(seed)
    queries = [" ".join(rng.choice(WORDS, 5)) for _ in range(n_queries)]
    labels = [" ".join(rng.choice(WORDS, 3)) for _ in range(n_labels)]
    rows = [rng.choice(n_labels, size=rng.integers(1, 4), replace=False) for _ in range(n_queries)]
    rows[3] = np.zeros(0, np.int64)  # a query without positives contributes nothing
    y = sp.csr_matrix((np.ones(sum(map(len, rows)), np.float32), np.concatenate(rows),
                       np.cumsum([0] + [len(r) for r in rows])), shape=(n_queries, n_labels))
    y.sort_indices()
    return queries, labels, y


def _objective(loss, chunk, sparse=False, dropout=0.3):
    queries, labels, y = _data()
    encoder = build_encoder({"type": "bag", "dim": 8, "vocab_size": 60, "sparse": sparse, "weighting": "learned"},
                            queries + labels)
    torch.manual_seed(0)
    net = DropoutDualEncoder(encoder, dropout)
    cfg = SamplingConfig(batch_size=12, clustered=False, label_space="full", label_chunk=chunk)
    return FullLabelObjective(net, loss, encoder.tokenize(queries), encoder.tokenize(labels), y, cfg)


def _grads(module):
    return {n: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone()
            for n, p in module.named_parameters() if p.grad is not None}


def _naive(obj, query_ids, seed):
    """All labels encoded with the graph, in the same chunks (so dropout draws the same masks), one backward."""
    obj.model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    q = obj.net(obj.queries[query_ids])
    n, c = len(obj.labels), obj.cfg.label_chunk
    z = torch.cat([obj.net(obj.labels[np.arange(s, min(s + c, n))]) for s in range(0, n, c)])
    positives = torch.from_numpy(obj.y[query_ids].toarray() > 0)
    loss = obj.loss_fn(q @ z.T, positives)
    loss.backward()
    return loss.detach(), _grads(obj.model)


def _cached(obj, query_ids, seed):
    obj.model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = obj.loss((0, 0, query_ids))
    after_forward = torch.get_rng_state()
    loss.backward()
    assert torch.equal(torch.get_rng_state(), after_forward)  # the replay leaves the caller's random state alone
    return loss.detach(), _grads(obj.model)


@pytest.mark.parametrize("chunk", [23, 5, 4, 1])  # one chunk; chunks not dividing L = 23; single labels
@pytest.mark.parametrize("loss", [
    lambda: DecoupledSoftmax(temperature=0.1),
    lambda: SoftTopK(k=3, temperature=0.2),
    lambda: DecoupledSoftmax(temperature=0.1, learnable_temperature=True),
])
def test_gradient_cache_equals_naive_full_label_gradients_with_dropout(loss, chunk):
    obj = _objective(loss(), chunk)
    query_ids = np.arange(12)
    naive_loss, naive = _naive(obj, query_ids, seed=7)
    cached_loss, cached = _cached(obj, query_ids, seed=7)
    assert torch.allclose(cached_loss, naive_loss, rtol=1e-6, atol=1e-7)
    assert naive.keys() == cached.keys() and len(naive) >= 2
    for name in naive:
        assert torch.allclose(cached[name], naive[name], rtol=1e-5, atol=1e-7), name


def test_dropout_makes_the_replay_necessary():
    """Without the recorded random states the re-encoded labels would differ: two passes draw other masks."""
    obj = _objective(DecoupledSoftmax(temperature=0.1), 5)
    torch.manual_seed(0)
    a, b = obj.net(obj.labels[np.arange(5)]), obj.net(obj.labels[np.arange(5)])
    assert not torch.allclose(a, b)


def test_sparse_embedding_gradients_match_and_stay_coalesced():
    obj = _objective(DecoupledSoftmax(temperature=0.1), 1, sparse=True)
    query_ids = np.arange(12)
    _, naive = _naive(obj, query_ids, seed=3)
    _, cached = _cached(obj, query_ids, seed=3)
    table = obj.net.encoder.embedding.weight
    for name in naive:
        assert torch.allclose(cached[name], naive[name], rtol=1e-5, atol=1e-7), name
    obj.model.zero_grad(set_to_none=True)
    obj.loss((0, 0, query_ids)).backward()
    # the replays of the 23 label chunks are coalesced to at most one row per table row; the query side
    # adds one uncoalesced row per query token, whatever L
    query_tokens = len(obj.queries[query_ids].ids)
    assert table.grad.is_sparse and table.grad._nnz() <= table.shape[0] + query_tokens


def test_hand_computed_decoupled_softmax_over_all_labels():
    # q = e1; labels e1 (positive), e2, -e1; τ = 1: S = [1, 0, -1],
    # ℓ = softplus(log(e^0 + e^-1) - 1) = 0.40761; ∂ℓ/∂S = [-0.33476, 0.24473, 0.09003]
    q = torch.tensor([[1.0, 0.0]])
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    value, grad_q, grad_z, _ = full_label_loss(DecoupledSoftmax(temperature=1.0), q, z, sp.csr_matrix([[1, 0, 0]]))
    assert value.item() == pytest.approx(0.40761, abs=1e-5)
    assert torch.allclose(grad_q, torch.tensor([[-0.42479, 0.24473]]), atol=1e-5)
    assert torch.allclose(grad_z, torch.tensor([[-0.33476, 0.0], [0.24473, 0.0], [0.09003, 0.0]]), atol=1e-5)


@pytest.mark.parametrize("block", [1, 7, 10**6])
def test_row_blocks_give_the_engine_loss_and_its_gradients(block):
    gen = torch.Generator().manual_seed(1)
    q = F.normalize(torch.randn(6, 4, generator=gen), dim=1).requires_grad_()
    z = F.normalize(torch.randn(9, 4, generator=gen), dim=1).requires_grad_()
    mask = torch.rand(6, 9, generator=gen) < 0.25
    mask[2] = False
    loss_fn = SoftTopK(k=2, temperature=0.5)
    expected = loss_fn(q @ z.T, mask)
    expected.backward()
    value, grad_q, grad_z, _ = full_label_loss(loss_fn, q, z, sp.csr_matrix(mask.numpy()), block_elements=block)
    assert torch.allclose(value, expected.detach(), atol=1e-6)
    assert torch.allclose(grad_q, q.grad, atol=1e-6) and torch.allclose(grad_z, z.grad, atol=1e-6)


def test_epoch_stats_and_bad_settings():
    obj = _objective(DecoupledSoftmax(), 8)
    obj.start_epoch(0)
    for item in obj.batches(0):
        obj.loss(item)
    assert obj.epoch_stats() == {"avg_pool_size": 23.0, "avg_positives_in_pool": obj.y.nnz / 12}
    queries, labels, y = obj.queries, obj.labels, obj.y
    with pytest.raises(ValueError, match="hard_negatives"):
        FullLabelObjective(obj.net, DecoupledSoftmax(), queries, labels, y, SamplingConfig(hard_negatives=2))
    with pytest.raises(ValueError, match="label_chunk"):
        FullLabelObjective(obj.net, DecoupledSoftmax(), queries, labels, y, SamplingConfig(label_chunk=0))
    with pytest.raises(ValueError, match="per-row"):
        FullLabelObjective(obj.net, build_loss("symmetric", q2l="paln"), queries, labels, y, SamplingConfig())


def test_replay_runs_under_the_autocast_of_the_first_pass():
    """Encoded under bf16 autocast (as the trainer's bf16 setting does), replayed outside it: the replay must
    re-enter autocast, so its gradients are those of the bf16 forward pass."""
    queries, labels, _ = _data()
    tokenizer = build_encoder({"type": "bag", "dim": 8, "vocab_size": 60}, queries + labels).tokenizer
    table = torch.randn(tokenizer.vocab_size, 12, generator=torch.Generator().manual_seed(0))
    net = DualEncoder(BagOfEmbeddings(tokenizer, 8, weighting="none", embeddings=table))  # a 12 -> 8 projection
    tokens = net.encoder.tokenize(labels)
    grad = torch.randn(len(labels), 8, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        encoding = encode_chunks(net, tokens, 5)
        for start in range(0, len(labels), 5):
            net(tokens[np.arange(start, min(start + 5, len(labels)))]).backward(grad[start : start + 5])
    expected = _grads(net)
    net.zero_grad(set_to_none=True)
    replay_chunks(net, tokens, encoding, grad)
    for name, value in _grads(net).items():
        assert torch.allclose(value, expected[name], rtol=1e-5, atol=1e-6), name
    net.zero_grad(set_to_none=True)
    net(tokens).backward(grad)  # the same pass in float32 differs: the check above is not vacuous
    assert not torch.allclose(_grads(net)["encoder.projection.weight"], expected["encoder.projection.weight"])
