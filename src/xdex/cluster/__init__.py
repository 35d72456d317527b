"""Clustering of embeddings: hierarchical balanced 2-means, plain spherical k-means, and DEXA's label clusters."""

from xdex.cluster.balanced import balanced_kmeans
from xdex.cluster.label_clusters import CLUSTER_METHODS, cluster_labels, clusters_for_ratio, label_centroids
from xdex.cluster.members import clusters_to_lists
from xdex.cluster.spherical import kmeans

__all__ = [
    "CLUSTER_METHODS",
    "balanced_kmeans",
    "cluster_labels",
    "clusters_for_ratio",
    "clusters_to_lists",
    "kmeans",
    "label_centroids",
]
