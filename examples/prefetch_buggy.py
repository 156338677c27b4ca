"""Prefetch the next batch to the GPU on a copy stream while the model runs on the current one.

Hazard: the batch is copied on `copy_stream`, but the compute stream never waits for that copy,
so the model may read the batch before it has arrived (CSL102 missing-join). And the batch is
dropped without `record_stream`, so when its last reference dies the caching allocator may hand
its block to the next copy on `copy_stream` while the model still reads it: the linter cannot
see that one (the batch goes to `model`, which might keep it alive), the sanitizer reports it
as a runtime-only free-in-use race.
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
        outputs = []
        for cpu_batch in self.batches:
            # Queued on copy_stream only: runs while the model still works on the last batch.
            with torch.cuda.stream(self.copy_stream):
                batch = cpu_batch.to(self.device, non_blocking=True)
            outputs.append(model(batch))  # expect: CSL102
        return outputs
