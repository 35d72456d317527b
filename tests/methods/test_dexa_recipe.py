"""DEXA's recipe wiring (DEXA Sec. 4): Module I's auxiliary vectors in the dual-encoder objective (Eq. 5),
dynamic re-clustering and resume, Module II's classifiers (Eq. 6), the fused model directory, and the
``aux`` / ``classifiers`` sections on other recipes.

Notation: E the encoder, N(v) = v / ‖v‖, C(l) the cluster of label l, a_k the auxiliary vector of
cluster k, ẑ_l = N(E(z_l) + a_{C(l)}) the augmented label embedding (Eq. 5), w_l the classifier of label l.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from ranking_asserts import assert_same_ranking
from safetensors.numpy import load_file
from torch import nn
from typer.testing import CliRunner

import xdex.data
import xdex.methods.classifiers as classifiers
from xdex.cli import app
from xdex.data.synthetic import memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.index.retrieval import retrieve
from xdex.inference.model import DualEncoderModel
from xdex.losses import build_loss
from xdex.methods.dexa import (
    AuxConfig,
    ClassifierConfig,
    build_aux,
    keep_module_i_labels,
    module_i_labels,
    train_classifiers,
)
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.pipeline import build_objective, train, trainer_settings
from xdex.methods.plugin import Run
from xdex.methods.popularity import PopularityBaseline
from xdex.methods.recipe import load_recipe
from xdex.metrics import Ranking, depth_with_filter, evaluate_predictions
from xdex.modules import AuxiliaryVectors, ClassifierFusionNet, DualEncoder
from xdex.train import Trainer, TrainerConfig
from xdex.train.optim import build_optimizers

runner = CliRunner()

TINY = ["encoder.dim=16", "encoder.vocab_size=600", "sampling.batch_size=64", "trainer.device=cpu",
        "trainer.progress=false", "data.validation_size=0"]  # settings of the small synthetic runs


# -- small synthetic problems ------------------------------------------------------------------------------
def tiny_dataset(n: int = 64):
    """DEXML's memorisation task: query i has the single positive label i."""
    return memorisation_task(n=n, length=6, vocab_size=300, seed=3)


def tiny_net(ds, dim: int = 8) -> DualEncoder:
    torch.manual_seed(0)
    return DualEncoder(build_encoder({"type": "bag", "dim": dim, "vocab_size": 400, "weighting": "none"},
                                     ds.train.texts + ds.labels.texts))


def tokens(net: DualEncoder, texts: list[str]):
    return net.encoder.tokenize(texts)


def random_vectors(aux: AuxiliaryVectors, seed: int = 1) -> torch.Tensor:
    """Give the auxiliary table non-zero values (unit-scale Gaussian rows) and return them."""
    a = torch.randn(aux.vectors.weight.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        aux.vectors.weight.copy_(a)
    return a


def augmented(z: torch.Tensor, a: torch.Tensor, assignment: torch.Tensor) -> torch.Tensor:
    """ẑ_l = N(z_l + a_{C(l)}) (Eq. 5), written out."""
    v = z + a[assignment]
    return v / v.norm(dim=1, keepdim=True)


def shortlist_by_hand(q: np.ndarray, z: np.ndarray, y: sp.csr_matrix, size: int) -> np.ndarray:
    """The ``size`` labels of highest qᵀz per query with the query's positives removed, best first."""
    out = []
    for i, scores in enumerate(q @ z.T):
        positives = set(y[i].indices.tolist())
        out.append([int(j) for j in np.argsort(-scores, kind="stable") if j not in positives][:size])
    return np.array(out)


class RecordingLoss(nn.Module):
    """A loss that keeps the score matrix and mask it was given."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, scores: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        self.seen.append((scores.detach().clone(), positives.clone()))
        return self.inner(scores, positives)


def objective(ds, net, assignment=None, loss=None, recluster=None, recluster_every=0, **sampling):
    aux = None if assignment is None else AuxiliaryVectors(np.asarray(assignment), net.dim)
    cfg = SamplingConfig(**{"batch_size": 16, **sampling})
    return DualEncoderObjective(net, loss or build_loss("softmax"), tokens(net, ds.train.texts),
                                tokens(net, ds.labels.texts), ds.train.labels, cfg, seed=0, aux=aux,
                                recluster=recluster, recluster_every=recluster_every)


# -- 1. Module I: A is reached through the label side only (Eq. 5) -------------------------------------------
def test_the_loss_sees_plain_queries_and_augmented_labels_and_a_gets_gradient_only_for_the_pools_clusters():
    ds = tiny_dataset(8)
    net = tiny_net(ds)
    assignment = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])  # labels 2l and 2l+1 share cluster l
    obj = objective(ds, net, assignment, loss=RecordingLoss(build_loss("softmax")), clustered=False)
    a = random_vectors(obj.aux)
    item = (0, 0, np.array([0, 1, 2]))  # queries 0-2: their positives 0-2 are the whole pool
    assert obj.make_batch(item).label_ids.tolist() == [0, 1, 2]

    obj.loss(item).backward()

    scores, _ = obj.loss_fn.seen[-1]
    with torch.no_grad():
        q = net(tokens(net, ds.train.texts[:3]))  # the plain network's output: no auxiliary vector
        z_hat = augmented(net(tokens(net, ds.labels.texts[:3])), a, assignment[:3])
    torch.testing.assert_close(scores, q @ z_hat.T, rtol=1e-5, atol=1e-6)
    grad = obj.aux.vectors.weight.grad
    assert grad.is_sparse
    grad = grad.coalesce()
    # labels 0, 1 -> cluster 0 and label 2 -> cluster 1; clusters 2 and 3 are not in the pool
    assert grad.indices()[0].tolist() == [0, 1]
    assert bool((grad.values().norm(dim=1) > 0).all())


def test_with_zero_auxiliary_vectors_the_loss_is_the_plain_objectives():
    ds = tiny_dataset(16)
    net = tiny_net(ds)
    plain = objective(ds, net, clustered=False)
    with_aux = objective(ds, net, np.arange(16) // 4, clustered=False)
    for item in plain.batches(0)[:2]:
        torch.testing.assert_close(with_aux.loss(item), plain.loss(item), rtol=1e-6, atol=1e-7)


# -- 2. hard negatives are mined over ẑ ---------------------------------------------------------------------
def test_the_hard_negative_refresh_searches_the_augmented_label_vectors():
    ds = tiny_dataset(64)
    net = tiny_net(ds)
    obj = objective(ds, net, np.arange(64) % 8, clustered=False, first_refresh=0, refresh_every=1,
                    hard_negatives=2, shortlist_size=5)
    a = random_vectors(obj.aux)
    obj.start_epoch(0)

    q = net.embed(obj.queries).numpy()
    z = net.embed(obj.labels)
    expected = shortlist_by_hand(q, augmented(z, a, obj.aux.assignment).numpy(), obj.y, 5)
    assert np.array_equal(obj.negatives.shortlist, expected)
    assert not np.array_equal(expected, shortlist_by_hand(q, z.numpy(), obj.y, 5))  # a search over z differs


# -- 3. dynamic clusters ----------------------------------------------------------------------------------
def spy_on_reclustering(obj: DualEncoderObjective, epochs: int) -> list[tuple[int, np.ndarray]]:
    """Run the epoch hooks of ``epochs`` epochs with a re-cluster function that records its epoch and input
    and returns the real assignment with cluster ids shifted by one (mod K)."""
    real, k = obj.recluster, obj.aux.num_clusters
    calls: list[tuple[int, np.ndarray]] = []
    epoch = 0

    def spy(z: np.ndarray) -> np.ndarray:
        calls.append((epoch, z.copy()))
        return (real(z) + 1) % k

    obj.recluster = spy
    for epoch in range(epochs):
        obj.start_epoch(epoch)
    return calls


def reclustering_objective(n: int, recluster_every: int, **sampling) -> DualEncoderObjective:
    """An objective with K = 4 clusters from :func:`build_aux` and its re-cluster function."""
    ds = tiny_dataset(n)
    net = tiny_net(ds)
    queries, labels = tokens(net, ds.train.texts), tokens(net, ds.labels.texts)
    aux, assign = build_aux(AuxConfig(clusters=4), net, queries, labels, ds.train.labels, 64, 0)
    return DualEncoderObjective(net, build_loss("softmax"), queries, labels, ds.train.labels,
                                SamplingConfig(batch_size=16, **sampling), aux=aux, recluster=assign,
                                recluster_every=recluster_every)


def test_dynamic_clusters_are_recomputed_every_second_refresh_from_the_label_embeddings_and_keep_k():
    obj = reclustering_objective(64, 2, first_refresh=1, refresh_every=2, cluster_size=8)
    before = obj.aux.assignment.clone()
    calls = spy_on_reclustering(obj, 10)
    # refreshes r = 0..4 at epochs 1, 3, 5, 7, 9; re-clustering at r = 2 and r = 4 (every second, not the first)
    assert [epoch for epoch, _ in calls] == [5, 9]
    z = obj.net.embed(obj.labels).numpy()  # the plain label embeddings, no auxiliary vectors
    for _, seen in calls:
        np.testing.assert_array_equal(seen, z)
    assert obj.aux.num_clusters == 4
    # the net was not trained, so the real clustering is the initial one; the spy shifted its ids by one
    assert torch.equal(obj.aux.assignment, (before + 1) % 4)


def test_dynamic_clusters_are_recomputed_at_refresh_epochs_without_query_clusters_or_hard_negatives():
    obj = reclustering_objective(32, 1, first_refresh=0, refresh_every=1, clustered=False, hard_negatives=0)
    calls = spy_on_reclustering(obj, 3)
    assert [epoch for epoch, _ in calls] == [1, 2]  # refreshes r = 1, 2; aux.recluster_every=1 must not be ignored


def test_reclustering_into_more_ids_than_the_table_has_keeps_training(tmp_path):
    ds = tiny_dataset(64)
    net = tiny_net(ds)
    obj = objective(ds, net, np.arange(64) % 3, recluster=lambda z: np.arange(64) % 4, recluster_every=1,
                    first_refresh=0, refresh_every=1, cluster_size=8)
    Trainer(obj, TrainerConfig(epochs=3, device="cpu", progress=False), tmp_path).fit()  # SparseAdam on A
    assert obj.aux.num_clusters == 4
    assert torch.equal(obj.aux.assignment, torch.arange(64) % 4)


class Killed(Exception):
    """Stands for the process dying at the start of an epoch (after the previous epoch's checkpoint)."""


def test_a_resumed_run_restores_the_assignment_and_the_vectors(tmp_path):
    ds = tiny_dataset(256)
    cfg = load_recipe("dexa", overrides=[
        *TINY, "sampling.first_refresh=0", "sampling.refresh_every=1", "sampling.hard_negatives=2",
        "aux.clusters=8", "aux.head_threshold=0", "aux.recluster_every=1", "trainer.epochs=4", "classifiers=null"])

    def build() -> DualEncoderObjective:
        torch.manual_seed(0)
        encoder = build_encoder(cfg.encoder, ds.train.texts + ds.labels.texts)
        return build_objective(cfg, encoder, encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts),
                               ds.train.labels)[1]

    killed = build()
    initial = killed.aux.assignment.clone()
    real, calls = killed.recluster, []

    def dies_on_second_call(z):
        calls.append(z)
        if len(calls) == 2:
            raise Killed
        return real(z)

    killed.recluster = dies_on_second_call  # re-clustering at epochs 1 and 2: dies at the start of epoch 2
    with pytest.raises(Killed):
        Trainer(killed, trainer_settings(cfg), tmp_path / "killed").fit()
    saved = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=False)
    assert saved["epoch"] == 1
    assert torch.equal(saved["model"]["aux.assignment"], killed.aux.assignment)
    assert not torch.equal(killed.aux.assignment, initial)  # epoch 1 re-clustered: restoring it matters
    torch.testing.assert_close(saved["model"]["aux.vectors.weight"], killed.aux.vectors.weight.detach())

    resumed = build()  # starts from the initial clusters and zero vectors ...
    assert torch.equal(resumed.aux.assignment, initial) and not resumed.aux.vectors.weight.any()
    Trainer(resumed, trainer_settings(cfg), tmp_path / "killed").fit(resume=True)
    full = build()
    Trainer(full, trainer_settings(cfg), tmp_path / "full").fit()
    # ... and ends where the uninterrupted run does
    assert torch.equal(resumed.aux.assignment, full.aux.assignment)
    for name, value in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=1e-5, atol=1e-6)


# -- 4. Module II --------------------------------------------------------------------------------------------
def test_module_ii_starts_the_classifiers_at_the_augmented_embeddings_and_mines_negatives_over_them(
        tmp_path, monkeypatch):
    ds = tiny_dataset(64)
    net = tiny_net(ds)
    queries, labels = tokens(net, ds.train.texts), tokens(net, ds.labels.texts)
    aux = AuxiliaryVectors(np.arange(64) % 8, net.dim)
    a = random_vectors(aux)
    built = []

    class Capturing(classifiers.ClassifierObjective):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(classifiers, "ClassifierObjective", Capturing)
    config = ClassifierConfig(epochs=0, hard_negatives=2, shortlist_size=5, fusion=0.25)
    fused = train_classifiers(net, aux, queries, labels, ds.train.labels, config,
                              TrainerConfig(device="cpu", progress=False), tmp_path, 64)

    z = net.embed(labels)
    z_hat = augmented(z, a, aux.assignment)
    torch.testing.assert_close(fused.classifiers, z_hat, rtol=1e-6, atol=1e-7)  # w_l ← ẑ_l, no step taken
    torch.testing.assert_close(fused.label_embeddings, z_hat, rtol=1e-6, atol=1e-7)  # Module I's ẑ_l is kept
    assert fused.alpha == 0.25 and fused.encoder is net.encoder
    (objective_ii,) = built
    expected = shortlist_by_hand(net.embed(queries).numpy(), z_hat.numpy(), ds.train.labels, 5)
    assert np.array_equal(objective_ii.negatives.shortlist, expected)


def test_module_ii_trains_the_classifiers_and_leaves_the_encoder_frozen(tmp_path):
    ds = tiny_dataset(64)
    net = tiny_net(ds)
    queries, labels = tokens(net, ds.train.texts), tokens(net, ds.labels.texts)
    encoder_before = {k: v.clone() for k, v in net.state_dict().items()}
    config = ClassifierConfig(epochs=1, batch_size=16, hard_negatives=2, shortlist_size=5)
    fused = train_classifiers(net, None, queries, labels, ds.train.labels, config,
                              TrainerConfig(device="cpu", progress=False), tmp_path, 64)
    for name, value in net.state_dict().items():
        assert torch.equal(value, encoder_before[name]), name
    z = net.embed(labels)
    assert not torch.allclose(fused.classifiers, z)  # without aux, w_l starts at E(z_l), then it moved
    assert fused.alpha == 0.5  # no validation split and no fusion weight given


def test_the_model_directory_holds_no_auxiliary_vectors_and_does_not_grow_with_k(tmp_path):
    ds = tiny_dataset(256)

    def files(k: int) -> dict[str, int]:
        out = tmp_path / f"k{k}"
        cfg = load_recipe("dexa", overrides=[*TINY, "trainer.epochs=1", "classifiers.epochs=1",
                                             f"aux.clusters={k}", "aux.head_threshold=0"])
        train(ds, cfg, out)
        for path in out.rglob("*.safetensors"):
            for name, table in load_file(str(path)).items():
                assert "aux" not in name and table.shape[0] != k, (path, name)
        return {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}

    small, large = files(2), files(128)
    assert sorted(small) == sorted(large) == [  # README.md: the model card
        "README.md", "config.yaml", "encoder/encoder.json", "encoder/model.safetensors", "encoder/tokenizer.json",
        "encoder/tokenizer_config.json", "heads.json", "heads.safetensors", "index/ids.npy", "index/index.json",
        "index/vectors.npy", "label_embeddings.npy", "labels.jsonl", "meta.json",
        "training/classifiers/metrics.jsonl", "training/config.yaml", "training/metrics.jsonl"]
    records = {"config.yaml", "meta.json", "training/config.yaml", "training/metrics.jsonl",
               "training/classifiers/metrics.jsonl"}  # text records: K and timings are written out
    assert {p: s for p, s in small.items() if p not in records} == {p: s for p, s in large.items() if p not in records}


# -- 4b. the label embeddings Module I leaves ------------------------------------------------------------------
def first_choices(x: np.ndarray, z: np.ndarray) -> sp.csr_matrix:
    """One label per document: the label of highest xᵀz."""
    top = np.argmax(x @ z.T, axis=1)
    return sp.csr_matrix((np.ones(len(top), np.float32), (np.arange(len(top)), top)), shape=(len(x), len(z)))


def module_i_setting():
    """A tiny network, 8 random cluster vectors over 64 labels, the label tokens and 32 documents' tokens, E(z), ẑ."""
    ds = tiny_dataset(64)
    net = tiny_net(ds)
    labels, docs = tokens(net, ds.labels.texts), tokens(net, ds.train.texts[:32])
    aux = AuxiliaryVectors(np.arange(64) % 8, net.dim)
    z = net.embed(labels)
    return net, aux, labels, docs, z, augmented(z, random_vectors(aux), aux.assignment)


@pytest.mark.parametrize("better", ["encoder", "augmented"])
def test_module_i_leaves_the_label_embeddings_that_rank_the_validation_documents_better(better):
    net, aux, labels, docs, z, z_hat = module_i_setting()
    x = net.embed(docs).numpy()
    winner, loser = (z, z_hat) if better == "encoder" else (z_hat, z)
    y = first_choices(x, winner.numpy())  # the documents' labels: those the winning side ranks first (P@1 100)
    assert (first_choices(x, loser.numpy()) != y).nnz > 0  # the other side ranks some of them lower
    torch.testing.assert_close(module_i_labels(net, aux, labels, "validation", (docs, y, None), 64), winner)
    # a setting that names the side is followed whatever the validation documents say
    torch.testing.assert_close(module_i_labels(net, aux, labels, "augmented", (docs, y, None), 64), z_hat)
    torch.testing.assert_close(module_i_labels(net, aux, labels, "encoder", (docs, y, None), 64), z)


def test_module_i_leaves_the_augmented_embeddings_on_a_tie_and_without_validation_documents():
    net, aux, labels, docs, _, z_hat = module_i_setting()
    no_labels = sp.csr_matrix((32, 64), dtype=np.float32)  # P@1 0 either way
    torch.testing.assert_close(module_i_labels(net, aux, labels, "validation", (docs, no_labels, None), 64), z_hat)
    torch.testing.assert_close(module_i_labels(net, aux, labels, "validation", None, 64), z_hat)


def test_a_bad_label_embeddings_setting_is_refused():
    with pytest.raises(ValueError, match="label_embeddings"):
        load_recipe("dexa", overrides=["aux.label_embeddings=plain"])


# -- 5, 6. the fused model on the bundled demo ---------------------------------------------------------------
@pytest.fixture(scope="module")
def demo():
    return xdex.data.load(xdex.data.bundled.resolve_source("demo"))


@pytest.fixture(scope="module")
def fused_demo(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("dexa") / "model"
    cfg = load_recipe("dexa", overrides=[
        "encoder.dim=64", "encoder.vocab_size=8000", "trainer.epochs=2", "trainer.eval_every=2",
        "sampling.first_refresh=1", "classifiers.epochs=2", "data.validation_size=500", "trainer.progress=false",
        "ranker=null"])  # DEXA's network alone (the ranking stage on top: test_ranker_stage.py)
    return train(demo, cfg, out), out


def test_search_modes_are_the_module_i_embeddings_the_classifiers_and_their_alpha_mix(demo, fused_demo):
    model, out = fused_demo
    alpha = json.loads((out / "heads.json").read_text())["alpha"]
    tables = load_file(str(out / "heads.safetensors"))
    assert sorted(tables) == ["classifiers", "label_embeddings"]
    z, w = tables["label_embeddings"], tables["classifiers"]
    plain = DualEncoder(model.net.encoder)  # Module I's network: the encoder is frozen after it
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)  # ẑ_l = N(E(z_l) + a_{C(l)}) ...
    assert not np.allclose(z, plain.embed(tokens(plain, model.label_texts)).numpy(), atol=1e-3)  # ... not E(z_l)

    texts = demo.test.texts[:300]
    q = plain.embed(tokens(plain, texts)).numpy()
    for mode, vectors in (("de", z), ("clf", w), ("fused", alpha * w + (1 - alpha) * z)):
        searched = model.with_search(mode)
        np.testing.assert_allclose(searched.label_embeddings, vectors, atol=1e-6)
        expected = retrieve(q, vectors, 10)
        got = searched.predict(texts, 10)
        np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5, atol=1e-6)
        assert (got.indices == expected.indices).mean() > 0.999, mode  # exact ties aside
    np.testing.assert_allclose(np.load(out / "label_embeddings.npy"), alpha * w + (1 - alpha) * z, atol=1e-6)
    assert model.search == "fused" and 0.0 <= alpha <= 1.0


def test_the_reloaded_model_predicts_the_same_in_every_mode(demo, fused_demo):
    model, out = fused_demo
    again = DualEncoderModel.load(out)
    texts = demo.test.texts[:200]
    for mode in ("fused", "de", "clf"):
        a, b = model.with_search(mode).predict(texts, 10), again.with_search(mode).predict(texts, 10)
        assert_same_ranking(a.indices, a.scores, b.indices, b.scores)


def test_cli_evaluate_with_the_de_search(demo, fused_demo):
    model, out = fused_demo
    result = runner.invoke(app, ["evaluate", str(out), "--data", "demo", "--search", "de", "--json"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.output.strip().splitlines()[-1])
    depth = depth_with_filter(5, demo.test.filter)
    library = evaluate_predictions(model.with_search("de").predict(demo.test.texts, depth), demo)
    for name in ("P@1", "P@5", "nDCG@5", "PSP@5"):
        assert cli[name] == pytest.approx(library[name], abs=1e-6)


def test_fused_dexa_beats_label_popularity_by_far_on_the_demo(demo, fused_demo):
    model, _ = fused_demo
    ids, scores = PopularityBaseline().fit(demo.train.labels).predict(len(demo.test), 50)
    baseline = evaluate_predictions(Ranking(ids, scores), demo)["P@1"]
    fused = evaluate_predictions(model.predict(demo.test.texts, 50), demo)["P@1"]
    de = evaluate_predictions(model.with_search("de").predict(demo.test.texts, 50), demo)["P@1"]
    assert baseline == pytest.approx(15.11, abs=0.01)
    # measured with seeds 0, 1, 2: fused 50.5, 52.2, 51.6 and the embeddings alone 40.8, 39.9, 40.2
    assert fused > 2.5 * baseline
    assert fused > de  # Module II and the fusion add to Module I's embeddings


# -- 7. the aux section on other recipes ----------------------------------------------------------------------
@pytest.mark.parametrize("method", ["dexml", "unidec"])
def test_an_aux_section_adds_auxiliary_vectors_to_other_recipes(method, tmp_path):
    ds = tiny_dataset(256)
    cfg = load_recipe(method, overrides=[*TINY, "trainer.epochs=2", "sampling.first_refresh=1",
                                         "sampling.refresh_every=1", "aux.clusters=16", "aux.lr=0.05"])
    assert cfg.aux == AuxConfig(clusters=16, lr=0.05) and cfg.classifiers is None

    torch.manual_seed(0)
    encoder = build_encoder(cfg.encoder, ds.train.texts + ds.labels.texts)
    _, obj = build_objective(cfg, encoder, encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts),
                             ds.train.labels)
    assert obj.aux is not None and obj.aux.num_clusters == 16 and obj.aux.dim == obj.net.dim
    obj.loss(obj.batches(0)[0]).backward()
    assert obj.aux.vectors.weight.grad is not None  # the label side of the loss is augmented
    (group,) = [g for opt in build_optimizers(obj.model, trainer_settings(cfg).optim) for g in opt.param_groups
                if any(p is obj.aux.vectors.weight for p in g["params"])]
    assert group["lr"] == 0.05

    model = train(ds, cfg, tmp_path / method)
    assert model.meta["method"] == method and model.predict(ds.test.texts[:5], 3).indices.shape == (5, 3)
    for path in (tmp_path / method).rglob("*.safetensors"):
        assert not any("aux" in name for name in load_file(str(path))), path
    # a dual encoder keeps Module I's ẑ as its label vectors; UniDEC's heads keep their own
    assert isinstance(model.net, ClassifierFusionNet) == (method == "dexml")


def test_without_module_ii_the_model_keeps_the_augmented_label_embeddings():
    """The saved label vectors are ẑ_l = N(E(z_l) + a_{C(l)}) (DEXA Sec. 4), not E(z_l)."""
    ds = tiny_dataset(64)
    cfg = load_recipe("dexml", overrides=[*TINY, "aux.clusters=8", "aux.head_threshold=0"])
    torch.manual_seed(0)
    encoder = build_encoder(cfg.encoder, ds.train.texts + ds.labels.texts)
    queries, labels = encoder.tokenize(ds.train.texts), encoder.tokenize(ds.labels.texts)
    net, obj = build_objective(cfg, encoder, queries, labels, ds.train.labels)
    a = random_vectors(obj.aux)
    run = Run(cfg, ds.train.labels, [], [], encoder=encoder, queries=queries, labels=labels, net=net, objective=obj)
    keep_module_i_labels(run)  # no validation documents: ẑ is kept
    z_hat = augmented(net.embed(labels), a, obj.aux.assignment)
    assert isinstance(run.net, ClassifierFusionNet) and run.net.search == "de"
    torch.testing.assert_close(run.net.label_vectors(labels), z_hat, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(run.net.query_vectors(queries), net.embed(queries))  # queries get no vector


@pytest.mark.parametrize("method", ["unidec", "depsl"])
def test_classifiers_on_a_recipe_with_heads_are_refused_before_training(method, tmp_path):
    data = tmp_path / "data"
    xdex.data.save(tiny_dataset(128), data, "jsonl")
    out = tmp_path / "model"
    result = runner.invoke(app, ["train", "--method", method, "--data", str(data), "--out", str(out),
                                 *[arg for setting in [*TINY, "trainer.epochs=1", "classifiers.epochs=1"]
                                   for arg in ("--set", setting)]])
    assert result.exit_code == 1
    assert "plain dual encoder" in str(result.exception or result.output)
    assert not (out / "training" / "metrics.jsonl").exists()  # refused before any epoch ran


def test_head_threshold_is_raised_when_head_labels_would_take_more_than_half_the_vectors():
    from xdex.methods.dexa import head_threshold

    # training points per label: 4, 3, 2, 1
    y = sp.csr_matrix(np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=np.float32))
    assert head_threshold(3, y, 4) == 3  # 2 head labels for 4 vectors: kept
    assert head_threshold(2, y, 4) == 3  # 3 head labels > 4 / 2: only labels with >= 3 points stay heads
    assert head_threshold(2, y, 2) == 4  # 1 head label (4 points) for 2 vectors
    assert head_threshold(0, y, 4) == 0 and head_threshold(5, y, 1) == 0  # off, or no room for a head label
