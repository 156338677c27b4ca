"""Uploads batches through one pinned staging buffer with non-blocking copies, so that the
copy of a batch overlaps the host preparing the next one.

Hazard: the copy out of the staging buffer is a DMA transfer the GPU performs later, but the
next iteration refills the buffer at once. The device may receive part of the next batch
(CSL302 pinned-source-overwrite).
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
        for batch in batches:
            self.staging.copy_(batch)  # expect: CSL302
            on_device.append(self.staging.to("cuda", non_blocking=True))
        return on_device
