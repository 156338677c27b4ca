"""Dismissed: flagged like racy.py, but `settle()` (another module) syncs the device first."""

from __future__ import annotations

import torch

from .helpers import settle


def shifted(x: torch.Tensor) -> torch.Tensor:
    side = torch.cuda.Stream()
    doubled = x * 2
    settle()
    with torch.cuda.stream(side):
        result = doubled + 1
    torch.cuda.current_stream().wait_stream(side)
    return result
