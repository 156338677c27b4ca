"""A two-branch head captured once into a CUDA graph and replayed per batch, plus a helper
that captures any function by hand.

Hazards: the auxiliary branch runs on a side stream inside the capture, but that stream was
never forked from the capture stream (nor joined back): its work is not part of the graph, it
runs once during capture and replays skip it (CSL502 unjoined-capture-fork). And the helper
begins the capture on the default stream, which CUDA refuses (CSL501
capture-on-default-stream).
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
            self.static_output = torch.relu(self.static_input @ self.weight)
            with torch.cuda.stream(self.side):  # expect: CSL502
                self.static_sums = self.static_input.sum(dim=1)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.static_input.copy_(x)  # expect: CSL103
        self.graph.replay()
        return self.static_output.clone(), self.static_sums.clone()  # expect: CSL102


def capture(
    fn: Callable[[torch.Tensor], torch.Tensor], static_input: torch.Tensor
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """A graph of `fn(static_input)` and its static output."""
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin()  # expect: CSL501
    static_output = fn(static_input)
    graph.capture_end()
    return graph, static_output
