"""The pinned loader standardizes every batch on the device, in order, reusing its two staging
buffers."""

from __future__ import annotations

import loader_buggy
import loader_fixed
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [loader_buggy, loader_fixed], ids=["buggy", "fixed"])
def test_loader_standardizes_every_batch(module):
    torch.manual_seed(0)
    batches = [torch.randn(4, 8) for _ in range(5)]
    mean, std = torch.stack(batches).mean(dim=0), torch.stack(batches).std(dim=0)
    loader = module.PinnedLoader(mean, std)
    assert all(buffer.is_pinned() for buffer in loader.staging)
    results = loader.run(batches)
    assert len(results) == len(batches)
    for result, batch in zip(results, batches, strict=True):
        assert result.is_cuda
        torch.testing.assert_close(result.cpu(), (batch - mean) / std, rtol=1e-4, atol=1e-5)
