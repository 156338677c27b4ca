"""Graph replays compute what eager code computes; capturing on the default stream fails on
the device, as CUDA does."""

from __future__ import annotations

import graphs_buggy
import graphs_fixed
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [graphs_buggy, graphs_fixed], ids=["buggy", "fixed"])
def test_head_replay_matches_eager(module):
    torch.manual_seed(0)
    weight = torch.randn(8, 4, device="cuda")
    x = torch.randn(16, 8, device="cuda")
    head = module.GraphedHead(weight, x)
    output, sums = head(x)
    torch.testing.assert_close(output, torch.relu(x @ weight))
    torch.testing.assert_close(sums, x.sum(dim=1))


def test_buggy_capture_fails_on_the_default_stream():
    static_input = torch.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match="non-default stream"):
        graphs_buggy.capture(lambda t: t * 2, static_input)


def test_fixed_capture_replays():
    static_input = torch.ones(4, device="cuda")
    graph, static_output = graphs_fixed.capture(lambda t: t * 2, static_input)
    static_input.fill_(3)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_output.cpu(), torch.full((4,), 6.0))
