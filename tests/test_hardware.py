"""xdex.hardware: the CPU probes."""

import torch

from xdex.hardware import cpu_has_bf16


def test_cpu_has_bf16_asks_torch_and_says_no_where_torch_cannot_tell(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_has_bf16() is True
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert cpu_has_bf16() is False
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert cpu_has_bf16() is True
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert cpu_has_bf16() is False
