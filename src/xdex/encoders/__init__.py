"""Text encoders: bag of embeddings and pre-trained transformers, built from configs, saved and loaded."""

from xdex.encoders.bag import BagOfEmbeddings, idf_weights
from xdex.encoders.base import Encoder
from xdex.encoders.factory import build_encoder, load_encoder
from xdex.encoders.pretrained import read_embedding_matrix
from xdex.encoders.transformer import Transformer

__all__ = [
    "BagOfEmbeddings",
    "Encoder",
    "Transformer",
    "build_encoder",
    "idf_weights",
    "load_encoder",
    "read_embedding_matrix",
]
