"""Uploads batches through one pinned staging buffer with non-blocking copies, so that the
copy of a batch overlaps the host preparing the next one.

Fixed: an event kept with the buffer, recorded after each copy, is synchronized before the
buffer is refilled, so the host waits for the previous copy out of it (and no longer), also
the one the previous call left running.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class StagingUploader:
    """Copies host batches of one shape to the device."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.staging = torch.empty(shape).pin_memory()
        self.copied = torch.cuda.Event()

    def upload(self, batches: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        on_device = []
        for batch in batches:
            self.copied.synchronize()  # the last copy out of the staging buffer is done
            self.staging.copy_(batch)
            on_device.append(self.staging.to("cuda", non_blocking=True))
            self.copied.record()
        return on_device
