"""SGD with an EMA on a side stream gives the same weights and EMA as the plain CPU loop."""

from __future__ import annotations

import ema_buggy
import ema_fixed
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def fit_on_cpu(weights, batches, lr, decay):
    """The reference: the same SGD and EMA, one stream, on the CPU."""
    ema = weights.clone()
    for inputs, targets in batches:
        weights -= lr * (inputs.t() @ (inputs @ weights - targets) / len(inputs))
        ema = decay * ema + (1 - decay) * weights
    return weights, ema


@pytest.mark.parametrize("module", [ema_buggy, ema_fixed], ids=["buggy", "fixed"])
def test_ema_trails_the_sgd_weights(module):
    torch.manual_seed(0)
    true_weights = torch.randn(4, 1)
    batches = [(inputs, inputs @ true_weights) for inputs in torch.randn(6, 16, 4)]
    weights, ema = fit_on_cpu(torch.zeros(4, 1), batches, lr=0.1, decay=0.9)
    trainer = module.EMATrainer(torch.zeros(4, 1, device="cuda"), lr=0.1, decay=0.9)
    ema_on_device = trainer.fit([(inputs.cuda(), targets.cuda()) for inputs, targets in batches])
    assert not torch.allclose(weights, ema)  # the EMA really lags: the check below can fail
    torch.testing.assert_close(trainer.weights.cpu(), weights)
    torch.testing.assert_close(ema_on_device.cpu(), ema)
