"""Reading the input token-embedding matrix of a local pre-trained model folder.

Such a matrix (e.g. BERT's ``embeddings.word_embeddings.weight``, or the static vectors of a
Model2Vec folder) initialises a bag-of-embeddings encoder; its rows follow the folder's tokenizer.
Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
# Tensor-name endings tried in order when no name is given.
EMBEDDING_SUFFIXES = ("word_embeddings.weight", "embed_tokens.weight", "embedding.weight", "embeddings")


def read_embedding_matrix(model_dir: str | Path, tensor_name: str | None = None) -> torch.Tensor:
    """The ``V x e`` token-embedding matrix of ``model_dir`` (float32).

    ``tensor_name`` picks the tensor; by default the first tensor whose name ends with one of
    :data:`EMBEDDING_SUFFIXES` is used.
    """
    model_dir = Path(model_dir)
    if (model_dir / SAFETENSORS_FILE).is_file():
        path = model_dir / SAFETENSORS_FILE
        with safe_open(str(path), framework="pt") as f:
            name = _pick(path, list(f.keys()), tensor_name)
            matrix = f.get_tensor(name)
    elif (model_dir / TORCH_FILE).is_file():
        path = model_dir / TORCH_FILE
        state = torch.load(path, map_location="cpu", weights_only=True)
        name = _pick(path, list(state), tensor_name)
        matrix = state[name]
    else:
        raise FileNotFoundError(f"{model_dir}: no {SAFETENSORS_FILE} or {TORCH_FILE}")
    if matrix.ndim != 2:
        raise ValueError(f"{path}: tensor {name!r} has shape {tuple(matrix.shape)}, expected a 2-D matrix")
    return matrix.float()


def _pick(path: Path, names: list[str], wanted: str | None) -> str:
    if wanted is not None:
        if wanted not in names:
            raise ValueError(f"{path}: no tensor named {wanted!r}")
        return wanted
    for suffix in EMBEDDING_SUFFIXES:
        for name in sorted(names):
            if name.endswith(suffix):
                return name
    shown = ", ".join(sorted(names)[:8])
    raise ValueError(f"{path}: no token-embedding matrix found (tensors: {shown}, ...); name one with tensor_name")
