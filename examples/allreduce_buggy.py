"""Bucketed gradient all-reduce overlapped with compute, as DDP does: each bucket of gradients
is flattened on the compute stream and averaged on a communication stream.

Hazard: `comm_stream` never waits for the compute stream, so the (simulated) all-reduce may
read and scale the flat bucket before `torch.cat` has written it (CSL101 missing-wait-stream).
It may also write the gradients back while `torch.cat` still reads them: the linter does not
see that one (the gradients are read through a comprehension variable), the sanitizer reports
it as a runtime-only write-after-read race.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


class BucketedAllReduce:
    """Averages gradients over `world_size` ranks bucket by bucket on a side stream."""

    def __init__(self, params: Iterable[nn.Parameter], world_size: int, bucket_numel: int) -> None:
        self.world_size = world_size
        self.buckets: list[list[nn.Parameter]] = [[]]
        for param in params:
            if self.buckets[-1] and sum(p.numel() for p in self.buckets[-1]) >= bucket_numel:
                self.buckets.append([])
            self.buckets[-1].append(param)
        self.comm_stream = torch.cuda.Stream()

    def all_reduce_grads(self) -> None:
        """Replace every gradient by its average over the ranks; ordered with later work."""
        for bucket in self.buckets:
            self._reduce_bucket(bucket)
        torch.cuda.current_stream().wait_stream(self.comm_stream)

    def _reduce_bucket(self, bucket: list[nn.Parameter]) -> None:
        """Launch the reduction of one bucket, as DDP does from the hook of its last gradient."""
        flat = torch.cat([param.grad.reshape(-1) for param in bucket])
        with torch.cuda.stream(self.comm_stream):
            flat.div_(self.world_size)  # stands in for dist.all_reduce(flat, op=AVG); expect: CSL101
            chunks = flat.split([param.numel() for param in bucket])
            for param, chunk in zip(bucket, chunks, strict=True):
                param.grad.copy_(chunk.view_as(param.grad))
        flat.record_stream(self.comm_stream)
