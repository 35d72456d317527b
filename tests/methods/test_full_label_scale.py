"""A saved model memory-maps its label embeddings and exact index, and searches the mapped matrix in blocks."""

import numpy as np
from ranking_asserts import assert_is_top_k, assert_same_ranking

from xdex.encoders.factory import build_encoder
from xdex.index import ExactIndex
from xdex.inference.model import DualEncoderModel
from xdex.modules.dual_encoder import DualEncoder

WORDS = "red green blue cyan black white grey pink gold teal navy lime".split()


def test_loaded_model_maps_its_label_matrices_and_predicts_the_same(tmp_path):
    rng = np.random.default_rng(0)
    labels = [" ".join(rng.choice(WORDS, 2)) for _ in range(40)]
    encoder = build_encoder({"type": "bag", "dim": 8, "vocab_size": 40}, labels)
    net = DualEncoder(encoder)
    z = net.label_vectors(encoder.tokenize(labels)).numpy()
    index = ExactIndex(8, "ip", chunk_items=7)  # 40 labels: 6 blocks, the last one short
    index.add(z)
    model = DualEncoderModel(net, [f"l{i}" for i in range(40)], labels, z, index)
    model.save(tmp_path / "model")
    loaded = DualEncoderModel.load(tmp_path / "model")
    assert isinstance(loaded.label_embeddings, np.memmap) and not loaded.label_embeddings.flags.writeable
    assert isinstance(loaded.index._stored, np.memmap)
    texts = ["red blue", "gold", "navy lime teal"]
    a, b = model.predict(texts, 5), loaded.predict(texts, 5)
    assert_same_ranking(a.indices, a.scores, b.indices, b.scores)  # labels of equal bags tie up to rounding
    assert_is_top_k(model.embed_texts(texts).astype(np.float64) @ z.T.astype(np.float64), b.indices, b.scores)
