"""Driver tests for torchao's CPUOffloadOptimizer: a few training steps of a small MLP with the
optimizer state on the host, against plain AdamW on the device.

torchao's own tests (the `torchao` suite) stop in the optimizer's constructor on an emulation
gap, `torch.empty_like(pinned_host_tensor, pin_memory=True)` with no `device=`; the fixture below
routes that one call to `torch.empty_like(t).pin_memory()` (the same pinned host tensor) so the
offload's stream code runs and its deliberate bugs can be looked for. With the gap fixed the
fixture changes nothing.
"""

import copy

import pytest
import torch
from torchao.optim import CPUOffloadOptimizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (or --csan-emulate)")


@pytest.fixture(autouse=True)
def pinned_empty_like(monkeypatch):
    original = torch.empty_like

    def empty_like(tensor, *args, pin_memory=False, **kwargs):
        if pin_memory and tensor.device.type == "cpu" and kwargs.get("device") in (None, "cpu"):
            return original(tensor, *args, **kwargs).pin_memory()
        return original(tensor, *args, pin_memory=pin_memory, **kwargs)

    monkeypatch.setattr(torch, "empty_like", empty_like)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to("cuda")


@pytest.mark.parametrize("offload_gradients", [False, True])
def test_offloaded_adamw_trains_like_adamw_on_the_device(offload_gradients):
    model = mlp()
    reference = copy.deepcopy(model)
    offloaded = CPUOffloadOptimizer(
        model.parameters(),
        torch.optim.AdamW,
        offload_gradients=offload_gradients,
        minimal_size=256,
        fused=False,
        lr=1e-2,
    )
    plain = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        inputs = torch.randn(16, 32, generator=generator).to("cuda")
        for net, optimizer in ((model, offloaded), (reference, plain)):
            net(inputs).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    torch.cuda.synchronize()
    for got, expected in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.cpu(), expected.cpu(), rtol=1e-4, atol=1e-5)
