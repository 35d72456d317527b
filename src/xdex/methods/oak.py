"""OAK: documents enriched with auxiliary knowledge, trained in three stages (OAK Sec. 4.1, Algorithm 1).

1. Linker R: an ordinary xdex recipe (``oak.linker``, NGAME by default) trained on the document → AKP
   links, with the AKPs as its labels; it is saved in ``MODEL_DIR/linker/`` so the OAK model predicts
   from text alone.
2. Augmentation block ψ = (encoder E, AK bank 𝒦, combiner 𝒞) trained on NGAME's batches (the
   :class:`~xdex.methods.objective.DualEncoderObjective`'s clusters, pools and hard negatives) with

       L = L(x̂·yᵀ) + L(x·yᵀ) + λ·L_MI-Calib(x̂, x, y)                          (Eq. 3-7, Algorithm 1)

   where L is the recipe's engine loss (the triplet of Eq. 3-4 by default), x = N(E(d)), x̂ = ψ(d) with
   the documents' own AKP links ("at train time, we use all the ground truth AKPs", Appendix A) and
   y = N(E(l)). ``encoder_term: false`` drops L(x·yᵀ) and ``calibration: 0`` the calibration term
   (Table 6). In the calibration term the plain score x·y is the reference (as the reference model of
   DPO, which the term follows): it gets no gradient there, so the term moves ψ and the labels, and
   cannot be lowered by making the plain encoder worse.
3. Stage 3: ψ frozen, per-label classifiers w_j = y_j + Δw_j learnt over the fixed x̂ of the training
   documents (true AKP links) with NGAME M2 / DEXA Module II's :class:`ClassifierObjective` on hard
   negatives. Inference (Sec. 4.2) queries the index over N(w_j) with x̂ (linker's top-K AKPs) and
   re-scores the candidates with sim(x̂, y_j) (:class:`~xdex.modules.oak.OakNet`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.encoders.factory import build_encoder
from xdex.index.retrieval import retrieve
from xdex.inference.model import MARKER, DualEncoderModel
from xdex.losses import MICalibration, WeightedSum, build_loss
from xdex.methods.classifiers import train_classifier_table
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.run import check_run_config, label_texts, split_validation, validation_filter, write_model
from xdex.methods.schema import OakConfig
from xdex.metrics.measures import compute_metrics
from xdex.metrics.ranking import depth_with_filter, remove_pairs
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.oak import LINKER_DIR, Augmentation, OakNet, link, pad_links
from xdex.text.tokens import TokenizedTexts
from xdex.train import Trainer, TrainerConfig
from xdex.train.distributed import barrier, encode_sharded, is_main, main_first
from xdex.train.trainer import CHECKPOINT

if TYPE_CHECKING:
    from xdex.methods.recipe import RecipeConfig  # recipe.py imports this module for OakConfig

LoadRecipe = Callable[..., "RecipeConfig"]  # xdex.methods.recipe.load_recipe(method, overrides=[...])
TrainRecipe = Callable[..., "DualEncoderModel | None"]  # xdex.methods.recipe.train(dataset, config, out, resume)

log = logging.getLogger(__name__)

REFINE = "refine"  # the training sub-folder of stage 3
BANK = "augment.bank."  # parameter-name prefix of the AK bank (its own learning rate)


class OakObjective(DualEncoderObjective):
    """Stage 2 (Algorithm 1): NGAME's batches and label pools, scored with x̂ and x (module docstring)."""

    def __init__(
        self,
        net: DualEncoder,
        augment: Augmentation,
        loss: nn.Module,
        queries: TokenizedTexts,
        labels: TokenizedTexts,
        train_labels: sp.csr_matrix,
        links: sp.csr_matrix,
        config: SamplingConfig,
        encoder_term: bool = True,
        calibration: float = 0.0,
        calibration_margin: float = 0.0,
        seed: int = 0,
    ):
        """``links``: the training documents' AKP links (``N x M``, row i = query i)."""
        super().__init__(net, loss, queries, labels, train_labels, config, seed)
        if links.shape != (len(queries), augment.bank.size):
            raise ValueError(f"AKP links {links.shape} for {len(queries)} documents and {augment.bank.size} AKPs")
        if calibration < 0:
            raise ValueError(f"the calibration weight must be >= 0, got {calibration}")
        self.augment = augment
        self.links = sp.csr_matrix(links)
        self.loss_terms = WeightedSum({"augmented": 1.0, "encoder": 1.0 if encoder_term else 0.0,
                                       "calibration": float(calibration)})  # Eq. 7
        self.calibration = MICalibration(calibration_margin)
        self.model = nn.ModuleDict({"net": net, "loss": loss, "augment": augment})

    def loss(self, item: tuple[int, int, np.ndarray]) -> torch.Tensor:
        batch = self.make_batch(item)
        self.pool_stats.add(batch)
        x = encode_sharded(self.net, self.queries, batch.query_ids)
        x_hat = self.augment(x, pad_links(self.links, batch.query_ids).to(x.device))
        y = encode_sharded(self.net, self.labels, batch.label_ids)
        positives = torch.from_numpy(batch.positives).to(x.device)
        terms = {"augmented": self.loss_fn(x_hat @ y.T, positives)}
        if self.loss_terms.needs("encoder"):
            terms["encoder"] = self.loss_fn(x @ y.T, positives)
        if self.loss_terms.needs("calibration"):
            terms["calibration"] = self.calibration(x.detach(), x_hat, y, positives)
        return self.loss_terms(**terms)


def linker_recipe(config: OakConfig, parent: TrainerConfig, load_recipe: LoadRecipe) -> RecipeConfig:
    """The linker's RecipeConfig: its packaged recipe (``oak.linker.method``, default ngame) with the other
    keys of ``oak.linker`` applied as overrides; progress bars follow the OAK run."""
    section = dict(config.linker)
    method = section.get("method", "ngame")
    if method == "oak":
        raise ValueError("oak.linker.method cannot be oak: the linker is a recipe without auxiliary knowledge")
    cfg = load_recipe(method, overrides=_as_overrides(section))
    cfg.trainer.progress = parent.progress
    return cfg


def _as_overrides(section: dict, prefix: str = "") -> list[str]:
    """``{"trainer": {"epochs": 5}}`` -> ``["trainer.epochs=5"]`` (values as JSON, a subset of YAML)."""
    out = []
    for key, value in section.items():
        if isinstance(value, dict) and value:
            out += _as_overrides(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def linker_dataset(dataset: Dataset) -> Dataset:
    """The linker's task: training documents → their AKPs (the AKPs are the labels)."""
    train = dataset.train
    links, aux_items = aux_links(dataset)
    return Dataset(f"{dataset.name}-linker", Split(train.ids, train.texts, links), aux_items)


def train_linker(dataset: Dataset, config: OakConfig, parent: TrainerConfig, out: Path, resume: bool,
                 load_recipe: LoadRecipe, train_recipe: TrainRecipe) -> DualEncoderModel:
    """Stage 1: the linker model directory ``out`` (loaded when a resumed run already finished it), trained by
    ``train_recipe`` (the recipe pipeline, handed in by it) on the recipe ``load_recipe`` gives."""
    if resume and (out / MARKER).is_file():
        log.info("stage 1: the linker in %s is already trained", out)
        return DualEncoderModel.load(out)
    log.info("stage 1: training the linker on %d AKP links", aux_links(dataset)[0].nnz)
    linker = train_recipe(linker_dataset(dataset), linker_recipe(config, parent, load_recipe), out, resume=resume)
    barrier()  # under torchrun rank 0 alone writes the linker; the other ranks read it once it is there
    return linker if linker is not None else DualEncoderModel.load(out)


def check_oak_recipe(dataset: Dataset, config: RecipeConfig) -> None:
    """Refuse settings OAK cannot train with, naming them."""
    if config.heads is not None or config.aux is not None or config.classifiers is not None:
        raise ValueError("the oak recipe trains a plain encoder with OAK's own stage 3: remove the heads, aux "
                         "and classifiers sections")
    if config.sampling.label_space != "pool" or config.sampling.cache_negatives:
        raise ValueError("the oak recipe trains on label pools with in-pool and shortlist negatives: set "
                         "sampling.label_space=pool and sampling.cache_negatives=0")
    aux_links(dataset)


def aux_links(dataset: Dataset) -> tuple[sp.csr_matrix, Catalogue]:
    """The training documents' links to auxiliary knowledge pieces and the pieces' catalogue."""
    if dataset.train.aux is None or dataset.aux_items is None:
        raise ValueError(f"{dataset.name}: OAK needs auxiliary knowledge pieces (an aux.jsonl catalogue and "
                         '"aux" links in the training rows); this dataset has none')
    return dataset.train.aux, dataset.aux_items


def train_oak(
    dataset: Dataset, config: RecipeConfig, out: str | Path, resume: bool, load_recipe: LoadRecipe,
    train_recipe: TrainRecipe,
) -> DualEncoderModel | None:
    """Train the three OAK stages of ``config`` (a RecipeConfig with an ``oak`` section) and write ``out``
    (under torchrun: rank 0 writes and returns the model, the other ranks return None). The linker is trained
    by ``train_recipe`` on the recipe ``load_recipe`` gives (the recipe module hands in its own)."""
    oak = config.oak
    if oak is None:
        raise ValueError("the oak recipe needs an oak section")
    check_oak_recipe(dataset, config)
    aux, aux_items = aux_links(dataset)
    out = Path(out)
    workdir = out / "training"
    check_run_config(workdir / "config.yaml", config, resume)
    seed = config.trainer.seed
    t0 = time.perf_counter()
    linker = train_linker(dataset, oak, config.trainer, out / LINKER_DIR, resume, load_recipe, train_recipe)
    torch.manual_seed(seed)

    train_rows, valid_rows = split_validation(dataset.train, config.data.validation_size, seed)
    y_all = dataset.train.labels
    y_train, links = y_all[train_rows], aux[train_rows]
    query_texts = [dataset.train.texts[i] for i in train_rows]
    lab_texts = label_texts(dataset.labels, config.data.label_text)
    akp_texts = label_texts(aux_items, config.data.label_text)
    encoder_cfg = {k: v for k, v in config.encoder.items() if v is not None}
    encoder = build_encoder(encoder_cfg, query_texts + lab_texts + akp_texts)
    cache = encoder.token_cache()
    with main_first():  # under torchrun rank 0 fills the token cache, then the other ranks read it
        queries, labels = cache.get(query_texts), cache.get(lab_texts)
    net = DualEncoder(encoder)
    embed_batch = config.sampling.embed_batch_size
    augment = Augmentation(net.embed(encoder.tokenize(akp_texts), embed_batch), oak.pooling)
    objective = OakObjective(net, augment, build_loss(**config.loss), queries, labels, y_train, links,
                             config.sampling, oak.encoder_term, oak.calibration, oak.calibration_margin, seed)

    evaluate = None
    if len(valid_rows):
        valid_texts = [dataset.train.texts[i] for i in valid_rows]
        with main_first():
            valid_tokens = cache.get(valid_texts)
        valid_ids = link(linker, valid_texts, oak.top_k, oak.threshold)
        y_valid = y_all[valid_rows]
        pairs = validation_filter(dataset, valid_rows)
        k_max = depth_with_filter(max(config.data.eval_ks), pairs)

        def evaluate() -> dict[str, float]:
            """x̂ (the linker's AKPs, as at inference) against the stage-2 label embeddings y."""
            q = augment.enrich(net.embed(valid_tokens, embed_batch), valid_ids, embed_batch).numpy()
            ranking = retrieve(q, net.embed(labels, embed_batch).numpy(), k_max)
            if pairs is not None:
                ranking = remove_pairs(ranking, pairs)
            return compute_metrics(ranking, y_valid, config.data.eval_ks)

    optim = dataclasses.replace(config.trainer.optim, group_lr={BANK: oak.bank_lr, **config.trainer.optim.group_lr})
    trainer = Trainer(objective, dataclasses.replace(config.trainer, optim=optim), workdir, evaluate=evaluate)
    log.info("stage 2: training the augmentation block")
    trainer.fit(resume=resume)

    log.info("stage 3: refining the label classifiers")
    y = net.embed(labels, embed_batch)
    x_hat = augment.enrich(net.embed(queries, embed_batch), pad_links(links), embed_batch)
    w = train_classifier_table(x_hat, y, y_train, oak.refine, config.trainer, workdir / REFINE, resume)
    train_seconds = time.perf_counter() - t0

    if not is_main():  # rank 0 alone writes the model directory
        return None
    oak_net = OakNet(encoder, augment, y, w, linker, oak.top_k, oak.threshold, oak.candidates).to("cpu")
    z = oak_net.label_vectors(labels, embed_batch).numpy()
    extra = {"n_aux": len(aux_items), "linker_validation": linker.meta.get("validation")}
    model = write_model(out, oak_net, z, lab_texts, dataset, config, trainer, len(train_rows),
                               len(valid_rows), train_seconds, [workdir / CHECKPOINT, workdir / REFINE / CHECKPOINT],
                               extra)
    log.info("OAK model written to %s (%.0f s)", out, train_seconds)
    return model

