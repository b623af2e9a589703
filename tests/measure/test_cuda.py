"""The CUDA paths. Skipped without a GPU; scripts/gpu-check.sh runs them on one."""

import math

import pytest
import torch

from eas.arch.builder import build
from eas.arch.reference import arch_from_text
from eas.data.datasets import load_dataset
from eas.measure.energy import make_meter
from eas.training.proxy import Fidelity, train
from eas.training.step import evaluate_accuracy

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda")
GENOME = "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0"


def test_images_move_to_the_gpu_once_as_stored_and_batches_match_the_cpu_ones():
    digits = load_dataset("digits")
    on_gpu = digits.train_x.to(GPU)
    assert isinstance(on_gpu.source, torch.Tensor) and on_gpu.source.is_cuda
    assert on_gpu.source.dtype == torch.uint8
    index = torch.tensor([5, 0, 77, 3])
    assert torch.allclose(on_gpu[index].cpu(), digits.train_x[index], atol=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_proxy_training_under_autocast_learns(precision):
    digits = load_dataset("digits")
    model = build(arch_from_text(GENOME), digits.input_shape, digits.num_classes)
    result = train(model, digits.train_x, digits.train_y, Fidelity(epochs=3, batch_size=64, precision=precision), GPU)
    assert result.precision == precision and math.isfinite(result.final_loss)
    assert evaluate_accuracy(model, digits.val_x, digits.val_y, GPU)[0] > 0.6


def test_nvml_measures_the_gpu_energy():
    meter, fallback = make_meter("auto", cuda=True)
    assert fallback is None and meter.source == "nvml"
    token = meter.start()
    x = torch.randn(4096, 4096, device=GPU)
    for _ in range(200):
        x = torch.tanh(x @ x)
    reading = meter.stop(token)
    assert reading.source == "nvml" and reading.joules > 0
