"""Activation offload: every layer's output is copied to pinned host memory on a side stream,
so that the copy of layer i's activation overlaps the compute of layer i+1.

Fixed: `offload_stream` waits for the compute stream before each copy, and each activation is
recorded as used by `offload_stream` (`record_stream`), so the caching allocator keeps its block
until the copy has read it.
"""

from __future__ import annotations

import torch
from torch import nn


class ActivationOffloader:
    """Runs a stack of linear layers for inference (e.g. feature extraction) and keeps each
    layer's output in pinned host buffers."""

    def __init__(self, layers: nn.Sequential, batch_size: int) -> None:
        self.layers = layers
        self.offload_stream = torch.cuda.Stream()
        self.host_buffers = [torch.empty(batch_size, layer.out_features).pin_memory() for layer in layers]

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The stack's output; `host_buffers[i]` holds layer i's output when this returns."""
        for index, layer in enumerate(self.layers):
            x = layer(x)
            self.offload_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.offload_stream):
                self.host_buffers[index].copy_(x, non_blocking=True)
            x.record_stream(self.offload_stream)
        self.offload_stream.synchronize()
        return x
