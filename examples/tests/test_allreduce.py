"""The bucketed all-reduce averages every gradient over the (simulated) ranks."""

from __future__ import annotations

import allreduce_buggy
import allreduce_fixed
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [allreduce_buggy, allreduce_fixed], ids=["buggy", "fixed"])
def test_gradients_are_averaged_over_the_ranks(module):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()
    model(torch.randn(32, 8, device="cuda")).square().mean().backward()
    expected = [param.grad.cpu() / 4 for param in model.parameters()]
    reducer = module.BucketedAllReduce(model.parameters(), world_size=4, bucket_numel=100)
    assert len(reducer.buckets) == 2
    reducer.all_reduce_grads()
    for param, reference in zip(model.parameters(), expected, strict=True):
        assert param.grad.is_cuda
        torch.testing.assert_close(param.grad.cpu(), reference)
