"""OAK's three stages (OAK Sec. 4.1, Algorithm 1): the stage-2 loss and its ablations, the linker's recipe,
the refined classifiers, and the whole recipe end to end through the CLI on data whose labels only the
auxiliary knowledge reveals.

Notation: x = N(E(d)), x̂ = ψ(d) the enriched document, y = N(E(l)), L the engine loss,
L_calib = (1/N) Σ_i Σ_j [δ_ij (x_i·y_j − x̂_i·y_j) + γ]_+ (Eq. 6).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from typer.testing import CliRunner

import xdex.data
from xdex.cli import app
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.encoders.factory import build_encoder
from xdex.inference.model import DualEncoderModel
from xdex.losses import build_loss
from xdex.methods.oak import OakConfig, OakObjective, check_oak, linker_dataset, linker_recipe
from xdex.methods.objective import SamplingConfig
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.modules import Augmentation, DualEncoder, OakNet
from xdex.modules.oak import pad_links
from xdex.train import TrainerConfig

runner = CliRunner()


# -- a small task whose labels only the AKPs reveal ----------------------------------------------------------
def _words(n: int, rng: np.random.Generator, taken: set[str]) -> list[str]:
    out = []
    while len(out) < n:
        word = "".join(rng.choice(list("bcdfghjklmnpqrstvwxz"), size=5))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def topic_task(seed: int = 0, topics: int = 6, entities: int = 48, per_entity: int = 8) -> Dataset:
    """A document's labels are the two labels of its topic, and its topic is its AKP. Labelled training
    documents are random words with an AKP link; other training documents name an entity, carry the AKP
    link of the entity's topic and have no labels (auxiliary data from another source); test documents
    name those entities. A model without AKPs cannot tell the topic of a labelled training document nor
    has it seen an entity with a label; OAK's linker learns each entity's topic, and the AK bank each
    topic's labels."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    names, noise = _words(entities, rng, taken), _words(40, rng, taken)
    topic_names, label_names = _words(topics, rng, taken), _words(2 * topics, rng, taken)

    def split(topic: np.ndarray, texts: list[str], labelled: bool, prefix: str) -> Split:
        n = len(topic)
        rows, cols = np.repeat(np.arange(n), 2), np.stack([2 * topic, 2 * topic + 1], 1).ravel()
        labels = sp.csr_matrix((np.ones(2 * n, np.float32), (rows, cols)), shape=(n, 2 * topics))
        aux = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), topic)), shape=(n, topics))
        if not labelled:
            labels = sp.csr_matrix((n, 2 * topics), dtype=np.float32)
        return Split([f"{prefix}{i}" for i in range(n)], texts, labels, akp=aux)

    def noisy(prefix: list[str]) -> list[str]:
        return [" ".join([*p, *rng.choice(noise, size=4)]) for p in prefix]

    n_plain = entities * per_entity // 2
    plain_topics = rng.integers(0, topics, size=n_plain)
    mentions = np.repeat(np.arange(entities), per_entity)
    a = split(plain_topics, noisy([[]] * n_plain), True, "p")
    b = split(mentions % topics, noisy([[names[e]] for e in mentions]), False, "u")
    train = Split(a.ids + b.ids, a.texts + b.texts, sp.vstack([a.labels, b.labels]).tocsr(),
                  akp=sp.vstack([a.akp, b.akp]).tocsr())
    asked = np.arange(entities).repeat(2)
    test = split(asked % topics, noisy([[names[e]] for e in asked]), True, "t")
    return Dataset("oak-topics", train, Catalogue([f"l{j}" for j in range(2 * topics)], label_names), test,
                   Catalogue([f"a{t}" for t in range(topics)], topic_names))


TINY = ["encoder.dim=32", "encoder.vocab_size=400", "sampling.batch_size=64", "trainer.device=cpu",
        "data.validation_size=0", "trainer.epochs=12", "oak.linker.encoder.dim=32",
        "oak.linker.encoder.vocab_size=400", "oak.linker.sampling.batch_size=64", "oak.linker.trainer.epochs=12",
        "oak.linker.data.validation_size=0", "oak.refine.epochs=4", "oak.top_k=1"]


@pytest.fixture(scope="module")
def topics(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "oak-topics"
    xdex.data.save(topic_task(), folder)
    return folder


def cli(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def evaluate(model, data) -> dict[str, float]:
    return json.loads(cli("evaluate", str(model), "--data", str(data), "--json"))


@pytest.fixture(scope="module")
def trained(topics, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    sets = [f"--set={s}" for s in TINY]
    cli("train", "--method", "oak", "--data", str(topics), "--out", str(root / "oak"), "--quiet", *sets)
    plain = [s for s in sets if not s.startswith("--set=oak.")]
    cli("train", "--method", "ngame", "--data", str(topics), "--out", str(root / "ngame"), "--quiet", *plain)
    return root


# -- end to end ----------------------------------------------------------------------------------------------
def test_oak_beats_the_same_model_without_akps_when_the_akps_carry_the_labels(trained, topics):
    oak, ngame = evaluate(trained / "oak", topics), evaluate(trained / "ngame", topics)
    # the test entities were never seen with a label: without AKPs, P@1 is near chance (1/6 of topics)
    assert ngame["P@1"] < 45.0
    assert oak["P@1"] > 85.0
    assert oak["P@1"] > ngame["P@1"] + 40.0


def test_the_model_directory_holds_its_linker_and_predicts_from_text(trained, topics, tmp_path):
    model = DualEncoderModel.load(trained / "oak")
    assert isinstance(model.net, OakNet) and model.net.top_k == 1
    assert (trained / "oak" / "linker" / "meta.json").is_file()
    assert not (trained / "oak" / "training" / "checkpoint.pt").exists()
    # the linker links the unlabelled entities' test documents to their topic
    data = xdex.data.load(topics)
    linked = model.net.linker.predict(data.test.texts, 1).indices[:, 0]
    assert np.mean(linked == data.test.akp.indices) > 0.9
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(data.test.texts[:5]) + "\n", encoding="utf-8")
    cli("predict", str(trained / "oak"), "--input", str(texts), "--output", str(tmp_path / "pred.jsonl"), "--k", "2")
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [r["labels"] for r in rows] == model.predict(data.test.texts[:5], 2).indices.tolist()
    # without augmentation the same model is no better than the model without AKPs
    plain = json.loads(cli("evaluate", str(trained / "oak"), "--data", str(topics), "--json", "--search", "encoder"))
    assert plain["P@1"] < evaluate(trained / "oak", topics)["P@1"] - 40.0


def test_a_finished_oak_model_is_not_trained_again(trained, topics):
    result = runner.invoke(app, ["train", "--method", "oak", "--data", str(topics), "--out", str(trained / "oak")])
    assert isinstance(result.exception, FileExistsError) and "already holds a trained model" in str(result.exception)


# -- stage 2: the loss of Algorithm 1 ----------------------------------------------------------------------
def stage2(data: Dataset, **terms) -> OakObjective:
    torch.manual_seed(0)
    net = DualEncoder(build_encoder({"type": "bag", "dim": 8, "vocab_size": 300, "weighting": "none"},
                                    data.train.texts + data.labels.texts))
    augment = Augmentation(torch.randn(len(data.akp_items), 8))
    torch.nn.init.normal_(augment.combiner.out.weight, std=0.5)
    rows = np.flatnonzero(np.diff(data.train.labels.indptr) > 0)
    tokens = net.encoder.tokenize
    return OakObjective(net, augment, build_loss("triplet", margin=0.3), tokens([data.train.texts[i] for i in rows]),
                        tokens(data.labels.texts), data.train.labels[rows], data.train.akp[rows],
                        SamplingConfig(batch_size=16, clustered=False), seed=0, **terms)


def test_the_stage_2_loss_is_the_sum_of_eq_3_4_and_6():
    obj = stage2(topic_task(), encoder_term=True, calibration=0.5, calibration_margin=0.2)
    item = obj.batches(0)[0]
    batch = obj.make_batch(item)
    with torch.no_grad():
        x = obj.net(obj.queries[batch.query_ids])
        x_hat = obj.augment(x, pad_links(obj.links, batch.query_ids))
        y = obj.net(obj.labels[batch.label_ids])
        pos = torch.from_numpy(batch.positives)
        delta = torch.where(pos, 1.0, -1.0)
        calib = (delta * (x @ y.T - x_hat @ y.T) + 0.2).clamp_min(0).sum() / len(x)  # Eq. 6 written out
        expected = obj.loss_fn(x_hat @ y.T, pos) + obj.loss_fn(x @ y.T, pos) + 0.5 * calib
    assert calib > 0
    torch.testing.assert_close(obj.loss(item).detach(), expected)

    no_terms = stage2(topic_task(), encoder_term=False, calibration=0.0)
    torch.testing.assert_close(no_terms.loss(item).detach(), obj.loss_fn(x_hat @ y.T, pos))


def test_the_calibration_term_treats_the_plain_score_as_a_fixed_reference():
    """L_calib moves x̂ and y, never x = N(E(d)) through its x·y term: the encoder's gradient from the stage-2
    loss equals that of Eq. 6 with x detached, not that of Eq. 6 with x attached."""
    obj = stage2(topic_task(), encoder_term=False, calibration=1.0, calibration_margin=0.2)
    obj.loss_fn = lambda scores, positives: scores.sum() * 0.0  # the calibration term alone
    item = obj.batches(0)[0]
    batch = obj.make_batch(item)
    table = obj.net.encoder

    def encoder_grad(detach: bool | None) -> torch.Tensor:
        obj.model.zero_grad(set_to_none=True)
        if detach is None:
            loss = obj.loss(item)
        else:
            x = obj.net(obj.queries[batch.query_ids])
            x_hat = obj.augment(x, pad_links(obj.links, batch.query_ids))
            y = obj.net(obj.labels[batch.label_ids])
            loss = obj.calibration(x.detach() if detach else x, x_hat, y, torch.from_numpy(batch.positives))
        loss.backward()
        return torch.cat([p.grad.to_dense().ravel() for p in table.parameters() if p.grad is not None])

    used, reference, attached = encoder_grad(None), encoder_grad(True), encoder_grad(False)
    torch.testing.assert_close(used, reference)
    assert not torch.allclose(used, attached)


def test_the_bank_gets_gradient_only_for_the_akps_of_the_batch():
    data = topic_task()
    obj = stage2(data, calibration=0.1, calibration_margin=0.1)
    item = obj.batches(0)[0]
    obj.loss(item).backward()
    grad = obj.augment.bank.table.weight.grad.coalesce()
    expected = sorted(set(obj.links[item[2]].indices.tolist()))
    assert sorted(grad.indices()[0].tolist()) == expected
    assert len(expected) < len(data.akp_items) or len(item[2]) > len(data.akp_items)


# -- stage 1 and the recipe ----------------------------------------------------------------------------------
def test_the_linker_recipe_is_ngame_with_the_oak_linker_overrides():
    section = {"trainer": {"epochs": 3}, "encoder": {"dim": 48}}
    cfg = linker_recipe(OakConfig(linker=section), TrainerConfig(progress=False))
    assert cfg.method == "ngame" and cfg.trainer.epochs == 3 and cfg.encoder["dim"] == 48
    assert cfg.trainer.progress is False and cfg.oak is None
    with pytest.raises(ValueError, match="cannot be oak"):
        linker_recipe(OakConfig(linker={"method": "oak"}), TrainerConfig())


def test_the_linker_task_has_the_akps_as_labels():
    data = topic_task()
    task = linker_dataset(data)
    assert task.labels is data.akp_items and (task.train.labels != data.train.akp).nnz == 0


def test_a_dataset_without_akps_is_refused_by_name(tmp_path):
    data = topic_task()
    plain = Dataset(data.name, Split(data.train.ids, data.train.texts, data.train.labels), data.labels)
    with pytest.raises(ValueError, match="oak-topics: OAK needs auxiliary knowledge pieces"):
        train(plain, load_recipe("oak"), tmp_path / "model")
    assert not (tmp_path / "model").exists()  # the refused run leaves nothing behind
    with pytest.raises(ValueError, match="remove the heads, aux and classifiers"):
        check_oak(load_recipe("oak", overrides=["aux={}"]))
    with pytest.raises(ValueError, match="remove the heads, aux and classifiers"):
        train(data, load_recipe("oak", overrides=["classifiers={}"]), tmp_path / "model")


def test_the_paper_settings_load_with_the_papers_bank_and_linker_choices():
    from xdex.methods.recipe import recipe_path

    cfg = load_recipe("oak", recipe_path("oak").with_name("oak-paper.yaml"),
                      ["encoder.model_dir=/models/distilbert", "oak.linker.encoder.model_dir=/models/distilbert"])
    assert cfg.encoder["type"] == "transformer" and cfg.trainer.epochs == 300 and cfg.sampling.batch_size == 1024
    assert cfg.oak.bank_lr == 0.2 and cfg.oak.top_k == 3 and cfg.oak.pooling == "attention"
    linker = linker_recipe(cfg.oak, cfg.trainer)
    assert linker.method == "ngame" and linker.encoder["type"] == "transformer"
    assert linker.encoder["model_dir"] == "/models/distilbert" and "vocab_size" not in linker.encoder
    assert linker.trainer.eval_every == 5 and linker.trainer.checkpoint_seconds == 60


def test_a_transformer_linker_naming_no_model_starts_from_the_oak_encoders():
    from xdex.methods.recipe import recipe_path

    cfg = load_recipe("oak", recipe_path("oak").with_name("oak-paper.yaml"), ["encoder.model_dir=/models/minilm"])
    assert linker_recipe(cfg.oak, cfg.trainer, cfg.encoder).encoder["model_dir"] == "/models/minilm"
    packaged = {"type": "transformer", "pretrained": "minilm"}
    assert linker_recipe(cfg.oak, cfg.trainer, packaged).encoder["pretrained"] == "minilm"
    own = load_recipe("oak", recipe_path("oak").with_name("oak-paper.yaml"),
                      ["encoder.model_dir=/models/minilm", "oak.linker.encoder.model_dir=/models/distilbert"])
    assert linker_recipe(own.oak, own.trainer, own.encoder).encoder["model_dir"] == "/models/distilbert"
    bag = linker_recipe(OakConfig(linker={}), TrainerConfig(), {"type": "transformer", "model_dir": "/m"})
    assert bag.encoder["type"] == "bag" and "model_dir" not in bag.encoder


@pytest.mark.slow
def test_two_process_oak_training_writes_one_model_as_good_as_one_process(trained, topics, tmp_path):
    """`torchrun --nproc_per_node=2 -m xdex train --method oak`: rank 0 writes the linker and the model, the
    other rank reads the linker and trains its share; the model equals the 1-process model in quality."""
    from torchrun_runner import torchrun_train

    run, out = torchrun_train(["--method", "oak", "--data", str(topics), "--quiet", *[f"--set={s}" for s in TINY]],
                              tmp_path / "oak2", timeout=300)
    assert run.stdout.count("model written to") == 1
    assert (out / "linker" / "meta.json").is_file() and not list(out.rglob("*.tmp"))
    two, one = evaluate(out, topics), evaluate(trained / "oak", topics)
    assert abs(two["P@1"] - one["P@1"]) <= 5.0 and two["P@1"] > 85.0
