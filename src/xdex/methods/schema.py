"""The schema of a recipe: every section a recipe YAML may have, as dataclasses with their defaults.

Pure data: this module imports no training or inference code, so any layer can check a recipe (the
inference layer checks a model directory's ``config.yaml`` against :class:`RecipeConfig`). The core
sections (encoder, loss, sampling, trainer, data, index) are fields of :class:`RecipeConfig`; a method's own
section (``heads``, ``aux``, ``classifiers``, ``oak``, or a plug-in's) is registered in :data:`SECTIONS` and
kept in ``RecipeConfig.sections``. Defaults equal ``configs/base.yaml`` (tested).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from xdex.config import ConfigError, convert, from_dict
from xdex.encoders.factory import BAG_DEFAULTS
from xdex.train.trainer import TrainerConfig

DEFAULT_LOSS = {"name": "triplet", "margin": 0.3, "num_negatives": 10}
RENAMED = {  # settings renamed since xdex 0.1.0 (section, old) -> new; saved recipes are read with the new names
    ("heads", "lam"): "de_weight",
    ("loss", "lam"): "q2l_weight",
    ("heads.classifier_loss", "lam"): "q2l_weight",
}


def renamed_settings(recipe: dict) -> list[tuple[str, str]]:
    """The (old, new) dotted names of renamed settings that ``recipe`` (a recipe as a mapping) still uses."""
    return [(f"{section}.{old}", f"{section}.{new}") for (section, old), new in RENAMED.items()
            if old in _section(recipe, section)]


def upgrade_names(recipe: dict) -> dict:
    """A copy of ``recipe`` with renamed settings under their new names (a recipe written by an older xdex)."""
    out = copy.deepcopy(recipe)
    for (section, old), new in RENAMED.items():
        node = _section(out, section)
        if old in node and new not in node:
            node[new] = node.pop(old)
    return out


def _section(recipe: dict, dotted: str) -> dict:
    """The mapping at ``dotted`` (e.g. ``heads.classifier_loss``) in ``recipe``; an empty one when there is none."""
    node: Any = recipe
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


@dataclass
class MiningIndexConfig:
    """How hard negatives are searched (the ``sampling.mining_index`` section): exact inner products over every
    label vector, an HNSW graph built over the label vectors at each refresh (:class:`xdex.index.HNSWIndex`;
    M, ef_construction and ef_search as there; built on one thread, so that a seed gives one graph), or ``auto``:
    the graph where the numbers of texts N and labels L make exact search the far larger work
    (:func:`xdex.sampling.negatives.mining_index`), exact search elsewhere."""

    kind: Literal["auto", "exact", "hnsw"] = "auto"
    M: int = 16  # links per node of the graph
    ef_construction: int = 32  # candidate list while building (cost grows with it)
    ef_search: int = 128  # candidate list while searching (at least the shortlist and the positives skipped)

    def __post_init__(self) -> None:
        for name, least in (("M", 2), ("ef_construction", 2), ("ef_search", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"sampling.mining_index.{name} must be an integer of at least {least}, got {value!r}")

    def settings(self) -> dict[str, Any]:
        """The index kind and its settings, as :meth:`xdex.sampling.HardNegatives.mine` takes them."""
        if self.kind == "exact":
            return {"index": "exact"}
        return {"index": self.kind, "M": self.M, "ef_construction": self.ef_construction, "ef_search": self.ef_search}


@dataclass
class SamplingConfig:
    """How batches and label pools are built."""

    batch_size: int = 256
    beta: int = 1  # positives sampled per query: 1 = one positive (POL), > 1 = pick-some-labels
    refresh_every: int = 4  # τ: epochs between refreshes of clusters and hard negatives
    first_refresh: int = 2  # epoch (0-based) of the first refresh; random batches before it
    clustered: bool = True  # NGAME negative-mining-aware batches
    cluster_size: int = 8  # cluster size at the first refresh ...
    cluster_growth: float = 2.0  # ... multiplied by this at every later refresh ...
    cluster_max: int = 32  # ... up to this size
    hard_negatives: int = 0  # η: hard negatives sampled per query per step (0 = in-batch only)
    shortlist_size: int | None = None  # |H_i|; default η·τ (UniDEC's advice)
    embed_batch_size: int = 1024
    label_space: Literal["pool", "full"] = "pool"  # full: every step scores all L labels (DEXML-Full, Sec. 4.2)
    label_chunk: int = 1024  # labels encoded at a time by the gradient cache of the full label space
    cache_negatives: int = 0  # hard negatives per query from the label-embedding cache each step (DEXML C.3)
    mining_index: MiningIndexConfig = field(default_factory=MiningIndexConfig)  # the search of hard negatives


@dataclass
class HeadsConfig:
    """UniDEC's heads (the ``heads`` section of the ``unidec`` and ``depsl`` recipes)."""

    dim: int = 256  # d of g1 and g2 (the paper: 256-512; search vectors are 2d with "concat")
    dropout: float = 0.1
    classifier: bool = True  # g2 + Ψ trained with L_C (UniDEC); false: the DE head alone (DePSL)
    classifier_loss: dict | None = None  # the loss of L_C; None: the same as `loss`
    classifier_init: Literal["labels", "random"] = "labels"  # Ψ_l ← Φ_C(z_l) before training, or random
    de_weight: float = 0.5  # λ of L = λ·L_D + (1 − λ)·L_C: the DE head's share, the classifier's is 1 − λ
    bce_weight: float = 0.0  # weight of an auxiliary OvA BCE on the classifier scores (0: none)
    extra_positives: int = 0  # β_E: positives per query added to the classifier's pool only (POS-CLF)
    search: Literal["concat", "de", "clf"] = "concat"  # the model directory's search mode


@dataclass
class ClassifierTraining:
    """How per-label classifiers are trained over fixed document features (NGAME M2, DEXA Module II, OAK stage 3)."""

    epochs: int = 10
    loss: dict = field(default_factory=lambda: {"name": "triplet", "margin": 0.3, "num_negatives": 10})
    batch_size: int = 256
    beta: int = 1  # positives sampled per document and step
    hard_negatives: int = 10  # η: negatives per document and step, from its shortlist
    shortlist_size: int = 100  # hard negatives kept per document (index over the starting classifiers)
    lr: float = 0.01  # SparseAdam learning rate of the classifiers


@dataclass
class ClassifierConfig(ClassifierTraining):
    """DEXA Module II: per-label classifiers on the frozen encoder (the ``classifiers`` section); hard negatives
    from an index over ẑ."""

    fusion: float | None = None  # α of the fused score; None: chosen on the validation split (0.5 without one)


@dataclass
class AuxConfig:
    """DEXA Module I: auxiliary vectors shared by clusters of labels (the ``aux`` section of a recipe)."""

    clusters: int | None = None  # K, a power of two; None: from labels_per_cluster
    labels_per_cluster: float = 64.0  # K ≈ L / this (chosen on validation; DEXA's advice: K between L/40 and L/2)
    head_threshold: int = 0  # head label partitioning: labels with this many training points get their own (0: off)
    clustering: Literal["balanced", "kmeans", "centroids"] = "balanced"  # over label embeddings, or label centroids
    recluster_every: int = 0  # dynamic clusters: re-cluster every this many refreshes (0: fixed); moments carry over
    lr: float | None = None  # learning rate of the vectors (SparseAdam, no weight decay); None: optim.lr_sparse
    # the label embeddings Module I leaves: ẑ_l (augmented, DEXA Sec. 4), E(z_l) (encoder), or the one that ranks
    # the validation documents better (validation; ẑ_l on ties and without validation documents)
    label_embeddings: Literal["validation", "augmented", "encoder"] = "validation"


@dataclass
class OakConfig:
    """The ``oak`` section of a recipe."""

    linker: dict = field(default_factory=dict)  # `method` (default ngame) + sections overriding its packaged recipe
    top_k: int = 3  # K: AKPs per document from the linker at inference (paper: 3)
    threshold: float | None = None  # drop linked AKPs scoring below this (None: keep all top-K)
    pooling: Literal["attention", "mean"] = "attention"  # the combiner; mean = Table 7's ablation
    bank_lr: float = 0.2  # SparseAdam learning rate of the AK bank (paper: 0.2)
    encoder_term: bool = True  # L(x·yᵀ), Eq. 4
    calibration: float = 0.01  # λ of L_MI-Calib (Eq. 6); 0 = off
    calibration_margin: float = 0.1  # γ of Eq. 6
    candidates: int = 100  # labels taken from the index per document before the re-scoring of Sec. 4.2
    refine: ClassifierTraining = field(default_factory=ClassifierTraining)


@dataclass
class RankerConfig:
    """The ranking stage (the ``ranker`` section; ``methods/ranker.py``): lexical channel and learned fusion."""

    dense_candidates: int = 20  # labels from the dense index per text (at least k when k labels are asked for)
    lexical_candidates: int = 20  # labels from the lexical model per text (docs/benchmarks.md: the choice)
    lexical_beam: int = 10  # Omikuji's beam width for that shortlist (0: the shortlist size)
    mention_candidates: int = 20  # labels the text names word for word (xdex.ranking.mentions; 0: no mention channel)
    encoder: str | None = None  # a packaged sentence encoder as one more channel, zero-shot (minilm; None: none)
    encoder_candidates: int = 20  # labels of highest cosine per text from that encoder
    lexical: dict = field(default_factory=dict)  # settings of xdex.ranking.LexicalConfig (default: its own)
    fusion: str = "trees"  # how a trained label's features are combined: boosted trees, or linear (logistic)
    fusion_c: float = 1.0  # inverse L2 strength of the logistic fits (the linear form; labels added later)
    select_epoch: bool = True  # choose the epoch on the fused ranking's validation score (false: the network's own)
    refit: bool = True  # once the fusion is fitted, refit the lexical channel and label priors on all training docs


@dataclass
class DataConfig:
    label_text: Literal["text", "text+desc"] = "text"  # what the label side of the encoder reads
    validation_size: int = 1000  # training documents held out for model selection (0: none)
    eval_ks: list[int] = field(default_factory=lambda: [1, 3, 5])


SECTIONS: dict[str, type] = {  # a method's own section of a recipe -> its dataclass
    "heads": HeadsConfig,  # UniDEC / DePSL heads; absent: the encoder's output is the embedding
    "aux": AuxConfig,  # DEXA Module I: auxiliary vectors for label clusters
    "classifiers": ClassifierConfig,  # DEXA Module II: per-label classifiers, fused scores
    "oak": OakConfig,  # OAK: linker, AK bank and combiner, refined classifiers (three stages)
    "ranker": RankerConfig,  # the ranking stage: lexical channel and learned fusion (every packaged recipe)
}


def register_section(name: str, schema: type) -> None:
    """Make ``name`` a recipe section read into the dataclass ``schema`` (a plug-in's own settings)."""
    core = {f.name for f in dataclasses.fields(RecipeConfig)}
    if name in core or SECTIONS.get(name, schema) is not schema:
        raise ValueError(f"the recipe section {name!r} is already taken")
    if not dataclasses.is_dataclass(schema):
        raise TypeError(f"the schema of section {name!r} must be a dataclass, got {schema!r}")
    SECTIONS[name] = schema


@dataclass
class RecipeConfig:
    """A whole recipe: the core sections, and in ``sections`` the method sections it has (see :data:`SECTIONS`)."""

    method: str = "ngame"
    encoder: dict = field(default_factory=lambda: {"type": "bag", **BAG_DEFAULTS})
    loss: dict = field(default_factory=lambda: dict(DEFAULT_LOSS))
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    index: dict = field(default_factory=lambda: {"kind": "exact"})
    sections: dict[str, Any] = field(default_factory=lambda: {"ranker": RankerConfig()})  # name -> SECTIONS[name]

    def section(self, name: str) -> Any:
        """The method section ``name`` (a dataclass of :data:`SECTIONS`), or None when the recipe has none."""
        return self.sections.get(name)

    @property
    def heads(self) -> HeadsConfig | None:
        return self.sections.get("heads")

    @property
    def aux(self) -> AuxConfig | None:
        return self.sections.get("aux")

    @property
    def classifiers(self) -> ClassifierConfig | None:
        return self.sections.get("classifiers")

    @property
    def oak(self) -> OakConfig | None:
        return self.sections.get("oak")

    @classmethod
    def from_dict(cls, data: dict, where: str = "") -> RecipeConfig:
        """The recipe of a YAML mapping: core sections as fields, registered method sections into ``sections``
        (a section set to null is absent); unknown keys are refused, naming them."""
        core = {f.name for f in dataclasses.fields(cls)} - {"sections"}
        unknown = sorted(set(data) - core - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(unknown)}; valid keys: "
                              f"{', '.join(sorted(core | set(SECTIONS)))}")
        sections = {name: convert(value, SECTIONS[name], name) for name, value in data.items()
                    if name in SECTIONS and value is not None}
        config = from_dict(cls, {k: v for k, v in data.items() if k in core}, where)
        config.sections = sections
        return config

    def to_dict(self) -> dict:
        """The recipe as a YAML mapping: the core sections, then each method section it has."""
        out = dataclasses.asdict(self)
        out.update(out.pop("sections"))
        return out

