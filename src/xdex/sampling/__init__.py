"""Batches for dual-encoder training: query batches, label pools and positive masks.

A batch is (query ids, label-pool ids, positives mask). POL (one positive per query),
PSL (up to β positives), in-batch negatives and ANN hard negatives are all ways of
building the label pool; the mask always marks *every* positive of a query that is in
the pool, so an in-batch positive is never used as a negative.
"""

from xdex.sampling.batch import Batch, PoolStats, build_batch, positives_mask, sample_positives, seeded_batch
from xdex.sampling.batching import ClusterSchedule, QueryBatcher
from xdex.sampling.negatives import HardNegatives

__all__ = [
    "Batch",
    "PoolStats",
    "build_batch",
    "positives_mask",
    "sample_positives",
    "seeded_batch",
    "ClusterSchedule",
    "QueryBatcher",
    "HardNegatives",
]
