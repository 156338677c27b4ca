"""Pipelined host-to-device loader: pageable batches staged through two pinned buffers and
copied on a copy stream, so the copy of batch i+1 overlaps the step on batch i.

Fixed: the compute stream waits for each copy (`wait_event`) and the device batch is recorded
as used by the compute stream (`record_stream`), so the caching allocator keeps its block from
later copies on `copy_stream` until `step`'s work on it is done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class PinnedLoader:
    """Copies batches of one shape to the device through double-buffered pinned memory."""

    def __init__(self, shape: tuple[int, ...], device: str = "cuda") -> None:
        self.device = device
        self.copy_stream = torch.cuda.Stream()
        self.staging = [torch.empty(shape).pin_memory() for _ in range(2)]
        self.copied: list[torch.cuda.Event | None] = [None, None]

    def run(
        self, batches: Iterable[torch.Tensor], step: Callable[[torch.Tensor], torch.Tensor]
    ) -> list[torch.Tensor]:
        """`step` applied on the device to every batch, in order."""
        compute_stream = torch.cuda.current_stream()
        results = []
        for index, batch in enumerate(batches):
            slot = index % 2
            previous_copy = self.copied[slot]
            if previous_copy is not None:
                previous_copy.synchronize()  # the staging buffer's last copy has been read
            copied = torch.cuda.Event()
            with torch.cuda.stream(self.copy_stream):
                staging = self.staging[slot]
                staging.copy_(batch)
                on_device = staging.to(self.device, non_blocking=True)
                copied.record()
            self.copied[slot] = copied
            compute_stream.wait_event(copied)
            on_device.record_stream(compute_stream)
            results.append(step(on_device))
        return results
