"""Prefetch the next batch to the GPU on a copy stream while the model runs on the current one.

Hazard: the batch is copied on `copy_stream`, but the compute stream never waits for that copy,
so the model may read the batch before it has arrived (CSL102 missing-join); and the batch is
dropped without `record_stream`, so when its last reference dies the caching allocator may hand
its block to the next copy on `copy_stream` while the model still reads it (CSL201).
"""

from __future__ import annotations

import torch
from torch import nn


class CUDAPrefetcher:
    """Feeds batches to a model, copying batch i+1 to the device while batch i is consumed."""

    def __init__(self, batches: list[torch.Tensor], device: str = "cuda") -> None:
        self.batches = [batch.pin_memory() for batch in batches]
        self.device = device
        self.copy_stream = torch.cuda.Stream()

    def run(self, model: nn.Module) -> list[torch.Tensor]:
        """The model's output for every batch, in order."""
        outputs = []
        with torch.cuda.stream(self.copy_stream):
            next_batch = self.batches[0].to(self.device, non_blocking=True)
        for index in range(len(self.batches)):
            batch = next_batch
            if index + 1 < len(self.batches):
                with torch.cuda.stream(self.copy_stream):
                    next_batch = self.batches[index + 1].to(self.device, non_blocking=True)
            outputs.append(model(batch))
        return outputs
