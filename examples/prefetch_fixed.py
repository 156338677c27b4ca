"""Prefetch the next batch to the GPU on a copy stream while the model runs on the current one.

Fixed: before taking a batch the compute stream waits for the copy stream (`wait_stream`), and
the batch is marked as used by the compute stream (`record_stream`), so the caching allocator
does not reuse its block for a later copy until the model is done with it.
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
        compute_stream = torch.cuda.current_stream()
        outputs = []
        with torch.cuda.stream(self.copy_stream):
            next_batch = self.batches[0].to(self.device, non_blocking=True)
        for index in range(len(self.batches)):
            compute_stream.wait_stream(self.copy_stream)
            batch = next_batch
            batch.record_stream(compute_stream)
            if index + 1 < len(self.batches):
                with torch.cuda.stream(self.copy_stream):
                    next_batch = self.batches[index + 1].to(self.device, non_blocking=True)
            outputs.append(model(batch))
        return outputs
