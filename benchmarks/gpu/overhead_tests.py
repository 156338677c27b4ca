"""GPU test code of the kind `pytest --csan` checks, for the overhead measurement of
benchmarks/gpu/check.py: streams, events, copies, a small model's training steps. Correctly
synchronized: every run must pass, checked or not."""

from __future__ import annotations

import pytest
import torch

STEPS = 30


@pytest.mark.parametrize("seed", range(4))
def test_training_steps_on_the_default_stream(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(STEPS):
        x = torch.randn(64, 256, device="cuda")
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert torch.isfinite(loss).item()


@pytest.mark.parametrize("seed", range(4))
def test_side_stream_prefetch_with_events(seed):
    torch.manual_seed(seed)
    side = torch.cuda.Stream()
    batches = [torch.randn(128, 128).pin_memory() for _ in range(STEPS)]
    total = torch.zeros((), device="cuda")
    for batch in batches:
        with torch.cuda.stream(side):
            on_device = batch.to("cuda", non_blocking=True)
            ready = side.record_event()
        torch.cuda.current_stream().wait_event(ready)
        on_device.record_stream(torch.cuda.current_stream())
        total += (on_device @ on_device).sum()
    torch.cuda.synchronize()
    assert torch.isfinite(total).item()


def test_downloads_and_host_syncs():
    x = torch.randn(512, 512, device="cuda")
    for _ in range(STEPS):
        y = (x @ x).relu()
        host = y.to("cpu", non_blocking=True)
        torch.cuda.current_stream().synchronize()
        assert host.shape == (512, 512)
        assert y.max().item() >= 0
