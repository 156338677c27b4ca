"""The logger records each step's loss, in order."""

from __future__ import annotations

import pytest
import readback_buggy
import readback_fixed
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [readback_buggy, readback_fixed], ids=["buggy", "fixed"])
def test_logger_keeps_every_loss(module):
    torch.manual_seed(0)
    weight = torch.randn(8, 1, device="cuda", requires_grad=True)
    logger = module.LossLogger()
    expected = []
    for _ in range(3):
        batch = torch.randn(16, 8, device="cuda")
        loss = (batch @ weight).pow(2).mean()
        expected.append(loss.item())
        assert logger.log(loss) == pytest.approx(expected[-1])
    assert logger.history == pytest.approx(expected)
