"""The snapshot is a host copy of the weights as they were when it was taken."""

from __future__ import annotations

import pytest
import snapshot_safe
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_snapshot_is_a_host_copy_of_the_weights():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    expected = torch.cat([param.detach().reshape(-1) for param in model.parameters()])
    snapshotter = snapshot_safe.WeightSnapshotter(model.cuda())
    flat = snapshotter.snapshot()
    with torch.no_grad():
        model.weight.add_(1.0)  # later training steps do not change a snapshot taken before
    assert flat.device.type == "cpu"
    torch.testing.assert_close(flat, expected)
