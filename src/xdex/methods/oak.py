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

import json
import logging

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.inference.model import MARKER, DualEncoderModel
from xdex.losses import MICalibration, WeightedSum, build_loss
from xdex.methods.classifiers import train_classifier_table
from xdex.methods.objective import DualEncoderObjective, SamplingConfig
from xdex.methods.plugin import Plugin, Run, register
from xdex.methods.recipe import load_recipe
from xdex.methods.run import label_texts
from xdex.methods.schema import OakConfig, RecipeConfig
from xdex.modules.dual_encoder import DualEncoder
from xdex.modules.oak import LINKER_DIR, Augmentation, OakNet, link, pad_links
from xdex.text.tokens import TokenizedTexts
from xdex.train import TrainerConfig
from xdex.train.distributed import barrier, encode_together
from xdex.train.trainer import CHECKPOINT

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
        x, y = encode_together(self.net, [(self.queries, batch.query_ids), (self.labels, batch.label_ids)])
        x_hat = self.augment(x, pad_links(self.links, batch.query_ids).to(x.device))
        positives = torch.from_numpy(batch.positives).to(x.device)
        terms = {"augmented": self.loss_fn(x_hat @ y.T, positives)}
        if self.loss_terms.needs("encoder"):
            terms["encoder"] = self.loss_fn(x @ y.T, positives)
        if self.loss_terms.needs("calibration"):
            terms["calibration"] = self.calibration(x.detach(), x_hat, y, positives)
        return self.loss_terms(**terms)


def linker_recipe(config: OakConfig, parent: TrainerConfig, encoder: dict | None = None) -> RecipeConfig:
    """The linker's RecipeConfig: its packaged recipe (``oak.linker.method``, default ngame) with the other
    keys of ``oak.linker`` applied as overrides; progress bars follow the OAK run. The linker ranks AKPs by its
    embeddings alone: it has no ranking stage unless ``oak.linker.ranker`` asks for one. A transformer linker
    that names no model starts from the OAK run's own (``encoder``: its ``model_dir`` or ``pretrained``), as
    the paper's linker and encoder start from the same pre-trained network."""
    section = dict(config.linker)
    method = section.get("method", "ngame")
    if method == "oak":
        raise ValueError("oak.linker.method cannot be oak: the linker is a recipe without auxiliary knowledge")
    cfg = load_recipe(method, overrides=_as_overrides(section))
    if "ranker" not in section:
        cfg.sections.pop("ranker", None)
    cfg.trainer.progress = parent.progress
    names_a_model = any(cfg.encoder.get(key) is not None for key in _MODEL_KEYS)
    if encoder is not None and cfg.encoder.get("type") == "transformer" and not names_a_model:
        cfg.encoder.update({key: encoder[key] for key in _MODEL_KEYS if encoder.get(key) is not None})
    return cfg


_MODEL_KEYS = ("model_dir", "pretrained")  # the encoder keys that name the network a transformer starts from


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
    links, akp_items = akp_links(dataset)
    return Dataset(f"{dataset.name}-linker", Split(train.ids, train.texts, links), akp_items)


def check_oak(config: RecipeConfig) -> None:
    """Refuse settings OAK cannot train with, naming them."""
    if config.heads is not None or config.aux is not None or config.classifiers is not None:
        raise ValueError("the oak recipe trains a plain encoder with OAK's own stage 3: remove the heads, aux "
                         "and classifiers sections")
    if config.sampling.label_space != "pool" or config.sampling.cache_negatives:
        raise ValueError("the oak recipe trains on label pools with in-pool and shortlist negatives: set "
                         "sampling.label_space=pool and sampling.cache_negatives=0")


def akp_links(dataset: Dataset) -> tuple[sp.csr_matrix, Catalogue]:
    """The training documents' links to auxiliary knowledge pieces (AKPs) and the pieces' catalogue."""
    if dataset.train.akp is None or dataset.akp_items is None:
        raise ValueError(f"{dataset.name}: OAK needs auxiliary knowledge pieces (an aux.jsonl catalogue and "
                         '"aux" links in the training rows); this dataset has none')
    return dataset.train.akp, dataset.akp_items


def _oak(run: Run) -> OakConfig:
    oak = run.config.oak
    assert oak is not None  # the plug-in is active
    return oak


def train_linker(run: Run) -> None:
    """Stage 1, before the encoder: the linker R in ``out/linker`` (loaded when a resumed run already finished it),
    trained by the pipeline itself on the documents' AKP links; the AKPs' texts join the encoder's vocabulary."""
    oak, dataset = _oak(run), run.dataset
    if dataset is None or run.out is None or run.train_rows is None or run.train_recipe is None:
        raise RuntimeError("OAK's stages run inside a training run (xdex.methods.pipeline.train) only")
    links, akp_items = akp_links(dataset)
    run.shared["links"] = links[run.train_rows]
    run.shared["akp_texts"] = akp_texts = label_texts(akp_items, run.config.data.label_text)
    run.vocabulary_texts += akp_texts
    out = run.out / LINKER_DIR
    if run.resume and (out / MARKER).is_file():
        log.info("stage 1: the linker in %s is already trained", out)
        linker = DualEncoderModel.load(out)
    else:
        log.info("stage 1: training the linker on %d AKP links", links.nnz)
        recipe = linker_recipe(oak, run.config.trainer, run.config.encoder)
        trained = run.train_recipe(linker_dataset(dataset), recipe, out, resume=run.resume)
        barrier()  # under torchrun rank 0 alone writes the linker; the other ranks read it once it is there
        linker = trained if trained is not None else DualEncoderModel.load(out)
    run.shared["linker"] = linker
    run.meta.update(n_akp=len(akp_items), linker_validation=linker.meta.get("validation"))


def build_oak(run: Run) -> tuple[DualEncoder, OakObjective]:
    """Stage 2's network (a dual encoder; the augmentation block ψ rides in the objective) and objective."""
    encoder, queries, labels = run.inputs()
    oak, config = _oak(run), run.config
    if "links" not in run.shared:
        raise RuntimeError("OAK's network is built inside a training run (xdex.methods.pipeline.train) only")
    net = DualEncoder(encoder)
    bank = net.embed(encoder.tokenize(run.shared["akp_texts"]), config.sampling.embed_batch_size)
    augment = Augmentation(bank, oak.pooling)
    objective = OakObjective(net, augment, build_loss(**config.loss), queries, labels, run.train_labels,
                             run.shared["links"], config.sampling, oak.encoder_term, oak.calibration,
                             oak.calibration_margin, config.trainer.seed)
    log.info("stage 2: training the augmentation block")
    return net, objective


def validation_links(run: Run) -> None:
    """Validation scores x̂ with the linker's top-K AKPs of each document, as at inference."""
    valid, oak = run.validation, _oak(run)
    if valid is None:
        return
    assert isinstance(run.objective, OakObjective) and isinstance(run.net, DualEncoder)  # build_oak's
    net, augment, batch = run.net, run.objective.augment, run.config.sampling.embed_batch_size
    ids = link(run.shared["linker"], valid.texts, oak.top_k, oak.threshold)
    run.validation_queries = lambda: augment.enrich(net.embed(valid.tokens, batch), ids, batch).numpy()


def refine(run: Run) -> None:
    """Stage 3, after the fit: ψ frozen, classifiers w_j = y_j + Δw_j over the training documents' x̂; the
    model's network becomes :class:`OakNet` (candidates from N(w_j), re-scored with sim(x̂, y_j))."""
    encoder, queries, labels = run.inputs()
    oak = _oak(run)
    assert isinstance(run.objective, OakObjective) and isinstance(run.net, DualEncoder)  # build_oak's
    log.info("stage 3: refining the label classifiers")
    net, augment, batch = run.net, run.objective.augment, run.config.sampling.embed_batch_size
    y = net.embed(labels, batch)
    x_hat = augment.enrich(net.embed(queries, batch), pad_links(run.shared["links"]), batch)
    workdir = run.training_folder() / REFINE
    w = train_classifier_table(x_hat, y, run.train_labels, oak.refine, run.config.trainer, workdir, run.resume,
                               run.config.sampling.mining_index)
    run.net = OakNet(encoder, augment, y, w, run.shared["linker"], oak.top_k, oak.threshold, oak.candidates)
    run.checkpoints.append(workdir / CHECKPOINT)


def bank_lr(config: RecipeConfig) -> dict[str, float]:
    """The AK bank's own learning rate (``oak.bank_lr``)."""
    return {} if config.oak is None else {BANK: config.oak.bank_lr}


register(Plugin("oak", OakConfig, check=check_oak, build=build_oak, lr_groups=bank_lr,
                before_encoder=(train_linker,), before_fit=(validation_links,), after_fit=(refine,)))
