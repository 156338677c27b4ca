"""A two-branch head captured once into a CUDA graph and replayed per batch, plus a helper
that captures any function by hand.

Fixed: the side stream is forked from the capture stream inside the capture and joined back
before it ends, so the auxiliary branch is part of the graph; the helper captures on a side
stream forked from (and joined back to) the current one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class GraphedHead:
    """`relu(x @ weight)` and the row sums of `x`, replayed from a graph for each batch."""

    def __init__(self, weight: torch.Tensor, example: torch.Tensor) -> None:
        self.weight = weight
        self.static_input = example.clone()
        self.side = torch.cuda.Stream()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            capture_stream = torch.cuda.current_stream()
            self.side.wait_stream(capture_stream)
            self.static_output = torch.relu(self.static_input @ self.weight)
            with torch.cuda.stream(self.side):
                self.static_sums = self.static_input.sum(dim=1)
            capture_stream.wait_stream(self.side)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.static_input.copy_(x)
        self.graph.replay()
        return self.static_output.clone(), self.static_sums.clone()


def capture(
    fn: Callable[[torch.Tensor], torch.Tensor], static_input: torch.Tensor
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """A graph of `fn(static_input)` and its static output."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin()
        static_output = fn(static_input)
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, static_output
