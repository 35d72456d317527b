"""What the CPU computes natively, asked of torch's own probes (shared by the encoders and the exact search)."""

from __future__ import annotations

import torch


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX-512 BF16 or AMX), which make bf16 products faster than float32.

    Asks torch's own CPU probes (``torch.cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``); False
    where a torch release lacks them. ``torch.backends.cpu.get_cpu_capability()`` says ``AVX512`` with or
    without BF16, so it cannot tell.
    """
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
