"""``DualEncoderModel.to(device)`` and ``--device``: where the network embeds texts. On a machine without a GPU
the CPU paths and the refusals are checked; the GPU's predictions are compared with the CPU's where one is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_runner import xdex_cli

from xdex.inference import DualEncoderModel

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_to_the_cpu_returns_the_model_and_predicts_the_same(trained, toy):
    model = DualEncoderModel.load(trained["unidec"])
    before = model.predict(toy.test.texts, 5)
    assert model.to("cpu") is model
    after = model.predict(toy.test.texts, 5)
    assert np.array_equal(before.indices, after.indices) and np.array_equal(before.scores, after.scores)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto means the GPU where there is one")
def test_auto_is_the_cpu_without_a_gpu(trained):
    model = DualEncoderModel.load(trained["ngame"]).to("auto")
    assert {p.device.type for p in model.net.encoder.parameters()} == {"cpu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_by_name(trained, toy, monkeypatch, capsys, tmp_path):
    model = DualEncoderModel.load(trained["ngame"])
    with pytest.raises(ValueError, match="device is 'cuda' but no CUDA device is available"):
        model.to("cuda")
    with pytest.raises(ValueError, match="device is 'gpu0': expected auto, cpu, cuda or cuda:N"):
        model.to("gpu0")
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(toy.test.texts[:3]) + "\n", encoding="utf-8")
    code, _, stderr = xdex_cli(monkeypatch, capsys, "predict", trained["ngame"], "--input", lines,
                               "--output", tmp_path / "out.jsonl", "--device", "cuda")
    assert code == 1 and "no CUDA device is available" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out.jsonl").exists()


@needs_gpu
@pytest.mark.parametrize("name", ["ngame", "unidec", "dexa"])
def test_predictions_on_a_gpu_match_the_cpu(trained, toy, name):
    cpu = DualEncoderModel.load(trained[name]).predict(toy.test.texts, 5)
    model = DualEncoderModel.load(trained[name]).to("cuda")
    assert {p.device.type for p in model.net.encoder.parameters()} == {"cuda"}
    gpu = model.predict(toy.test.texts, 5)
    np.testing.assert_allclose(gpu.scores, cpu.scores, atol=1e-4)
    clear = (cpu.scores[:, 0] - cpu.scores[:, 1]) > 1e-3  # a first label ahead of the second by more than rounding
    assert clear.any() and np.array_equal(gpu.indices[clear, 0], cpu.indices[clear, 0])
