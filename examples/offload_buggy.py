"""Activation offload: every layer's output is copied to pinned host memory on a side stream,
so that the copy of layer i's activation overlaps the compute of layer i+1.

Hazard: `offload_stream` never waits for the compute stream, so the copy may read an activation
before the layer has written it (CSL101 missing-wait-stream). And the activation is dropped on
the next iteration without `record_stream`, so the caching allocator may give its block to the
next layer's output while the copy still reads it: the linter cannot see that one (the
activation goes to `layer`, which might keep it alive), the sanitizer reports it as a
runtime-only free-in-use race.
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
            with torch.cuda.stream(self.offload_stream):
                self.host_buffers[index].copy_(x, non_blocking=True)  # expect: CSL101
        self.offload_stream.synchronize()
        return x
