"""Prefetch the next batch to the GPU on a copy stream while the model runs on the current one.

Fixed: before using each batch the compute stream waits for the copy stream (`wait_stream`), and
the batch is marked as used by the compute stream (`record_stream`), so the caching allocator
does not reuse its block for a later copy until the model is done with it.
"""

from __future__ import annotations

import torch
from torch import nn


class CUDAPrefetcher:
    """Feeds batches to a model; the copy of batch i+1 overlaps the model's work on batch i."""

    def __init__(self, batches: list[torch.Tensor], device: str = "cuda") -> None:
        self.batches = [batch.pin_memory() for batch in batches]
        self.device = device
        self.copy_stream = torch.cuda.Stream()

    def run(self, model: nn.Module) -> list[torch.Tensor]:
        """The model's output for every batch, in order."""
        compute_stream = torch.cuda.current_stream()
        outputs = []
        for cpu_batch in self.batches:
            # Queued on copy_stream only: runs while the model still works on the last batch.
            with torch.cuda.stream(self.copy_stream):
                batch = cpu_batch.to(self.device, non_blocking=True)
            compute_stream.wait_stream(self.copy_stream)
            batch.record_stream(compute_stream)
            outputs.append(model(batch))
        return outputs
