"""Pipelined host-to-device loader: pageable batches staged through two pinned buffers and
copied on a copy stream, so the copy of batch i+1 overlaps the work on batch i.

Fixed: the compute stream waits for each copy (`wait_event`) and the device batch is recorded
as used by the compute stream (`record_stream`), so the caching allocator keeps its block from
later copies on `copy_stream` until the compute stream's work on it is done.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class PinnedLoader:
    """Copies batches of one shape to the device through double-buffered pinned memory and
    standardizes them there."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, device: str = "cuda") -> None:
        self.mean = mean.to(device)
        self.std = std.to(device)
        self.device = device
        self.copy_stream = torch.cuda.Stream()
        self.staging = [torch.empty(mean.shape).pin_memory() for _ in range(2)]
        self.in_flight: list[torch.cuda.Event | None] = [None, None]

    def run(self, batches: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        """Every batch standardized on the device, in order."""
        compute_stream = torch.cuda.current_stream()
        results = []
        for index, batch in enumerate(batches):
            slot = index % 2
            staging = self.staging[slot]
            in_flight = self.in_flight[slot]
            if in_flight is not None:
                in_flight.synchronize()  # the last copy out of this staging buffer is done
            copied = torch.cuda.Event()
            with torch.cuda.stream(self.copy_stream):
                staging.copy_(batch)
                on_device = staging.to(self.device, non_blocking=True)
                copied.record()
            self.in_flight[slot] = copied
            compute_stream.wait_event(copied)
            on_device.record_stream(compute_stream)
            results.append((on_device - self.mean) / self.std)
        return results
