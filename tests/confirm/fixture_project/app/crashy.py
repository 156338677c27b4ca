"""Error: flagged, safe thanks to `settle()`, but its only test kills the process after it ran."""

from __future__ import annotations

import torch

from app.helpers import settle


def shifted(x: torch.Tensor) -> torch.Tensor:
    side = torch.cuda.Stream()
    doubled = x * 2
    settle()
    with torch.cuda.stream(side):
        result = doubled + 1
    torch.cuda.current_stream().wait_stream(side)
    return result
