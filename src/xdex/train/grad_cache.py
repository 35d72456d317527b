"""Gradient cache (DEXML Sec. 4.2 and Appendix B.5, after Gao et al. 2021): encode many texts with the memory of
one chunk.

A step that needs the embeddings of far more texts than fit with their activations runs in two passes:

1. :func:`encode_chunks` encodes the texts chunk by chunk without a graph and records, for each chunk, the
   random-number state it started from and the autocast setting in force;
2. once the loss and its gradient G = ∂ℓ/∂Z with respect to the embeddings are known, :func:`replay_chunks`
   encodes each chunk again, now with the graph, from the same random state (dropout draws the same masks,
   so the embeddings are the same) and back-propagates its rows of G.

Only one chunk's activations are alive at a time, so the memory of the encoder is bounded by the chunk
size, not by the number of texts; the price is a second forward pass (Appendix B.5.1). The parameter
gradients equal those of one pass over all texts with the graph. Sparse parameter gradients (a bag
encoder's ``sparse=True`` table) are coalesced whenever their entries outnumber the table's rows, so
they stay within the table's size plus one chunk's, whatever the number of texts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from xdex.text.tokens import TokenizedTexts


@dataclass
class ChunkedEncoding:
    """Embeddings encoded without a graph, and what :func:`replay_chunks` needs to encode them again."""

    positions: np.ndarray  # the texts encoded, in the order of the rows of ``vectors``
    vectors: Tensor  # [len(positions), d], no graph
    chunk: int
    rng_states: list[tuple[Tensor, Tensor | None]]  # per chunk: CPU state, CUDA state of the device (or None)
    autocast: tuple[bool, torch.dtype]  # autocast on the net's device type, and its dtype


def _device(net: nn.Module) -> torch.device:
    return next(net.parameters()).device


def _rng_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[Tensor, Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _starts(n: int, chunk: int) -> range:
    """First positions of the chunks; no texts still make one empty chunk, so that the embeddings have their
    width and every parameter takes part in the backward pass (as on the other ranks of a distributed run)."""
    return range(0, n, chunk) if n else range(1)


def encode_chunks(
    net: nn.Module, tokens: TokenizedTexts, chunk: int, positions: np.ndarray | None = None
) -> ChunkedEncoding:
    """Pass 1: ``net(tokens[positions])`` in chunks of ``chunk`` texts, without a graph, in the net's current
    mode (dropout stays active in training), recording each chunk's random state; all texts by default."""
    if chunk < 1:
        raise ValueError(f"the label chunk must be a positive number of texts, got {chunk}")
    positions = np.arange(len(tokens), dtype=np.int64) if positions is None else np.asarray(positions, np.int64)
    device = _device(net)
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    parts, states = [], []
    with torch.no_grad():
        for start in _starts(len(positions), chunk):
            states.append(_rng_state(device))
            parts.append(net(tokens[positions[start : start + chunk]]))
    return ChunkedEncoding(positions, torch.cat(parts), chunk, states, autocast)


def replay_chunks(net: nn.Module, tokens: TokenizedTexts, encoding: ChunkedEncoding, grad: Tensor) -> None:
    """Pass 2: re-encode each chunk of ``encoding`` with the graph from its recorded random state and
    back-propagate its rows of ``grad`` (∂ℓ/∂``encoding.vectors``) into the parameters of ``net``.

    The caller's random state is left as it was.
    """
    if grad.shape != encoding.vectors.shape:
        raise ValueError(f"the cached gradient has shape {tuple(grad.shape)}, the embeddings "
                         f"{tuple(encoding.vectors.shape)}")
    device = _device(net)
    enabled, dtype = encoding.autocast
    params = [p for p in net.parameters() if p.requires_grad]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for i, start in enumerate(_starts(len(encoding.positions), encoding.chunk)):
            _set_rng_state(encoding.rng_states[i], device)
            with torch.enable_grad(), torch.autocast(device.type, dtype=dtype, enabled=enabled):
                z = net(tokens[encoding.positions[start : start + encoding.chunk]])
            z.backward(grad[start : start + encoding.chunk].to(device=z.device, dtype=z.dtype))
            for p in params:  # a sparse gradient grows by every chunk's rows; merge them once they outnumber p's
                if p.grad is not None and p.grad.is_sparse and p.grad._nnz() > len(p):
                    p.grad = p.grad.coalesce()
