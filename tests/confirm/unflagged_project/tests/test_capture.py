"""The first test's capture raises inside `torch.cuda.graph`, whose `__exit__` then leaves the
offload stream current; the second test's race must still be found."""

from __future__ import annotations

import pytest
import torch

from app.offload import Offloader

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

offloader = Offloader()


def test_a_capture_on_the_offload_stream_raises():
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with pytest.raises(RuntimeError, match="unjoined"):
        with torch.cuda.graph(graph, stream=offloader.stream):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                x.mul(2)


def test_b_offload_after_the_failed_capture():
    activation = torch.ones(4, device="cuda") * 3
    assert offloader.offload(activation).tolist() == [3.0] * 4
