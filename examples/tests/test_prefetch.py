"""The prefetcher feeds the model every batch, in order. On the emulated device data moves
eagerly, so the buggy module's numbers are right too; `pytest --csan` tells the two apart."""

from __future__ import annotations

import prefetch_buggy
import prefetch_fixed
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [prefetch_buggy, prefetch_fixed], ids=["buggy", "fixed"])
def test_prefetcher_feeds_every_batch_in_order(module):
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    batches = [torch.randn(16, 8) for _ in range(4)]
    with torch.no_grad():
        expected = [model(batch) for batch in batches]
        outputs = module.CUDAPrefetcher(batches).run(model.cuda())
    assert [output.device.type for output in outputs] == ["cuda"] * len(batches)
    for output, reference in zip(outputs, expected, strict=True):
        torch.testing.assert_close(output.cpu(), reference, rtol=1e-4, atol=1e-5)
