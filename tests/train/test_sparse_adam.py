"""RowSparseAdam against torch.optim.SparseAdam: the same updates, states and checkpoints."""

import numpy as np
import pytest
import torch

from xdex.train import sparse_adam
from xdex.train.sparse_adam import RowSparseAdam


def sparse_grad(rows, values, shape, coalesced=False):
    indices = torch.tensor([rows], dtype=torch.int64)
    grad = torch.sparse_coo_tensor(indices, torch.as_tensor(values, dtype=torch.float32), shape, check_invariants=True)
    if coalesced:
        grad = grad.coalesce()
    return grad


# per step: (rows, coalesced flag) of the first table's gradient; repeated and unsorted rows, an empty gradient
STEPS = [([1, 4, 6], True), ([6, 1, 1, 3], False), ([0, 2, 5, 7], False), ([], False),
         ([7, 6, 5, 4, 3, 2, 1, 0], False)]


def run(optimizer_class, steps=STEPS, **options):
    """Parameters and states after the steps: two tables in two groups (the second without a gradient at step 2)."""
    torch.manual_seed(0)
    tables = [torch.nn.Parameter(torch.randn(8, 3)), torch.nn.Parameter(torch.randn(5, 1))]
    opt = optimizer_class([{"params": [tables[0]], "lr": 0.1}, {"params": [tables[1]], "lr": 0.03}], **options)
    rng = np.random.default_rng(1)
    for i, (rows, coalesced) in enumerate(steps):
        tables[0].grad = sparse_grad(rows, rng.normal(size=(len(rows), 3)), (8, 3), coalesced)
        tables[1].grad = None if i == 2 else sparse_grad([4, 0], rng.normal(size=(2, 1)), (5, 1))
        opt.step()
    return tables, opt


def assert_same(ours, theirs):
    (tables, opt), (ref_tables, ref_opt) = ours, theirs
    for p, q in zip(tables, ref_tables, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)
        state, ref_state = opt.state[p], ref_opt.state[q]
        assert state["step"] == ref_state["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(state[key], ref_state[key], rtol=1e-6, atol=1e-7)


def test_same_updates_and_states_as_torch_sparse_adam(monkeypatch):
    calls = []
    compiled = sparse_adam._adam_rows
    monkeypatch.setattr(sparse_adam, "_adam_rows", lambda *args: calls.append(len(args[3])) or compiled(*args))
    ours = run(RowSparseAdam, betas=(0.8, 0.99), eps=1e-6)
    assert_same(ours, run(torch.optim.SparseAdam, betas=(0.8, 0.99), eps=1e-6))
    # one compiled pass per non-empty gradient, repeated rows merged first: 3, 3, 4, -, 8 rows of the first table
    assert calls == [3, 2, 3, 2, 4, 2, 8, 2]
    assert ours[1].state[ours[0][0]]["step"] == len(STEPS)  # an empty gradient counts as a step, as in torch's


def test_rows_without_gradient_are_left_alone():
    tables, opt = run(RowSparseAdam, steps=STEPS[:1])
    torch.manual_seed(0)
    start = torch.randn(8, 3)
    untouched = [0, 2, 3, 5, 7]
    assert torch.equal(tables[0].detach()[untouched], start[untouched])
    assert not bool((tables[0].detach()[[1, 4, 6]] == start[[1, 4, 6]]).any())
    assert torch.equal(opt.state[tables[0]]["exp_avg"][untouched], torch.zeros(5, 3))


def test_maximize_takes_torchs_step(monkeypatch):
    monkeypatch.setattr(sparse_adam, "_adam_rows", lambda *args: pytest.fail("the compiled pass ran"))
    assert_same(run(RowSparseAdam, maximize=True), run(torch.optim.SparseAdam, maximize=True))


def test_double_tables_take_torchs_step(monkeypatch):
    monkeypatch.setattr(sparse_adam, "_adam_rows", lambda *args: pytest.fail("the compiled pass ran"))
    results = []
    for optimizer_class in (RowSparseAdam, torch.optim.SparseAdam):
        table = torch.nn.Parameter(torch.ones(4, 2, dtype=torch.float64))
        opt = optimizer_class([table], lr=0.1)
        table.grad = torch.sparse_coo_tensor(torch.tensor([[3, 1]]), torch.ones(2, 2, dtype=torch.float64), (4, 2),
                                             check_invariants=True)
        opt.step()
        results.append(table.detach())
    assert torch.equal(results[0], results[1])


def test_a_dense_gradient_is_refused_as_by_torch():
    table = torch.nn.Parameter(torch.ones(4, 2))
    table.grad = torch.ones(4, 2)
    with pytest.raises(RuntimeError, match="does not support dense gradients"):
        RowSparseAdam([table]).step()


def test_state_dict_moves_between_torchs_optimiser_and_ours():
    """A checkpoint of either optimiser continues in the other exactly as in itself."""
    head, tail = STEPS[:2], STEPS[2:]
    for first, second in ((torch.optim.SparseAdam, RowSparseAdam), (RowSparseAdam, torch.optim.SparseAdam)):
        tables, opt = run(first, steps=head)
        moved = second(opt.param_groups)
        moved.load_state_dict(opt.state_dict())
        rng = np.random.default_rng(2)
        for rows, coalesced in tail:
            tables[0].grad = sparse_grad(rows, rng.normal(size=(len(rows), 3)), (8, 3), coalesced)
            tables[1].grad = None
            moved.step()
        reference_tables, reference = run(torch.optim.SparseAdam, steps=head)
        rng = np.random.default_rng(2)
        for rows, coalesced in tail:
            reference_tables[0].grad = sparse_grad(rows, rng.normal(size=(len(rows), 3)), (8, 3), coalesced)
            reference_tables[1].grad = None
            reference.step()
        assert_same((tables, moved), (reference_tables, reference))


def test_closure_loss_is_returned():
    table = torch.nn.Parameter(torch.ones(3, 2))
    table.grad = sparse_grad([2], [[1.0, -1.0]], (3, 2))
    assert RowSparseAdam([table], lr=0.5).step(lambda: 7.0) == 7.0
    # Adam's first step moves each touched entry by lr against the sign of its gradient (up to ε)
    torch.testing.assert_close(table.detach(), torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.5, 1.5]]))


def test_a_graph_that_saved_the_table_sees_the_update():
    """As after torch's in-place update, back-propagating through a graph made before the step is refused."""
    table = torch.nn.Parameter(torch.ones(3, 2))
    saved = (table * table).sum()
    table.grad = sparse_grad([0], [[1.0, 1.0]], (3, 2))
    RowSparseAdam([table]).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()
