"""Uploads batches through one pinned staging buffer with non-blocking copies, so that the
copy of a batch overlaps the host preparing the next one.

Fixed: an event recorded after each copy is synchronized before the buffer is refilled, so
the host waits for the previous copy out of it (and no longer).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class StagingUploader:
    """Copies host batches of one shape to the device."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.staging = torch.empty(shape).pin_memory()

    def upload(self, batches: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        on_device = []
        copied = torch.cuda.Event()
        for batch in batches:
            copied.synchronize()  # the last copy out of the staging buffer is done
            self.staging.copy_(batch)
            on_device.append(self.staging.to("cuda", non_blocking=True))
            copied.record()
        return on_device
