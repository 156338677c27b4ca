"""Standardizing on the side stream gives zero mean and unit deviation, with and without a scale."""

from __future__ import annotations

import events_buggy
import events_fixed
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [events_buggy, events_fixed], ids=["buggy", "fixed"])
@pytest.mark.parametrize("scale", [None, 2.0])
def test_standardized(module, scale):
    torch.manual_seed(0)
    side = torch.cuda.Stream()
    x = torch.randn(64, device="cuda") * 3 + 1
    out = module.standardize_async(x, side, scale)
    assert abs(out.mean().item()) < 1e-5
    assert out.std().item() == pytest.approx(1.0, abs=1e-5)
