"""Clustering of embeddings: hierarchical balanced 2-means and plain spherical k-means."""

from xdex.cluster.balanced import balanced_kmeans
from xdex.cluster.members import clusters_to_lists
from xdex.cluster.spherical import kmeans

__all__ = ["balanced_kmeans", "kmeans", "clusters_to_lists"]
