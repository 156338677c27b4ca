"""Loss logging without a stall per step: each step's loss is copied to the host with a
non-blocking copy, so the host does not wait for the GPU to finish the step.

Hazard: the copy returns as soon as it is queued, and the logger reads the host tensor at
once. Until the stream reaches the copy, the pinned buffer holds garbage: the history gets
zeros or stale losses, now and then (CSL301 unsynced-host-read).
"""

from __future__ import annotations

import torch


class LossLogger:
    """Keeps every step's loss as a Python float."""

    def __init__(self) -> None:
        self.history: list[float] = []

    def log(self, loss: torch.Tensor) -> float:
        host = loss.detach().to("cpu", non_blocking=True)
        value = host.item()  # expect: CSL301
        self.history.append(value)
        return value
