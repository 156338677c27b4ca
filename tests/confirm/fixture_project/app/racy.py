"""Confirmed: the side stream reads `doubled` with no wait for the stream that wrote it."""

from __future__ import annotations

import torch


def shifted(x: torch.Tensor) -> torch.Tensor:
    side = torch.cuda.Stream()
    doubled = x * 2
    with torch.cuda.stream(side):
        result = doubled + 1
    torch.cuda.current_stream().wait_stream(side)
    return result
