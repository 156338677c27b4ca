"""The offloader returns the stack's output and leaves every layer's output in host memory."""

from __future__ import annotations

import offload_buggy
import offload_fixed
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [offload_buggy, offload_fixed], ids=["buggy", "fixed"])
def test_every_activation_lands_in_host_memory(module):
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4))
    inputs = torch.randn(5, 8)
    with torch.no_grad():
        expected = [inputs]
        for layer in layers:
            expected.append(layer(expected[-1]))
    offloader = module.ActivationOffloader(layers.cuda(), batch_size=5)
    output = offloader.forward(inputs.cuda())
    torch.testing.assert_close(output.cpu(), expected[-1], rtol=1e-4, atol=1e-5)
    for buffer, reference in zip(offloader.host_buffers, expected[1:], strict=True):
        assert buffer.is_pinned()
        torch.testing.assert_close(buffer, reference, rtol=1e-4, atol=1e-5)
