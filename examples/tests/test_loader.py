"""The pinned loader applies the step to every batch, in order, reusing its two staging buffers."""

from __future__ import annotations

import loader_buggy
import loader_fixed
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [loader_buggy, loader_fixed], ids=["buggy", "fixed"])
def test_loader_applies_the_step_to_every_batch(module):
    torch.manual_seed(0)
    batches = [torch.randn(4, 8) for _ in range(5)]
    loader = module.PinnedLoader((4, 8))
    assert all(buffer.is_pinned() for buffer in loader.staging)
    results = loader.run(batches, lambda batch: batch.square().sum(dim=1))
    assert len(results) == len(batches)
    for result, batch in zip(results, batches):
        assert result.is_cuda
        torch.testing.assert_close(result.cpu(), batch.square().sum(dim=1), rtol=1e-4, atol=1e-5)
