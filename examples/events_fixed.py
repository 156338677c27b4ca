"""Standardizes features on a side stream, which waits for the features through an event.

Fixed: the event is recorded on every path, after whatever produced the features, so the side
stream's wait always orders it after them.
"""

from __future__ import annotations

import torch


def standardize_async(x: torch.Tensor, side: torch.cuda.Stream, scale: float | None = None) -> torch.Tensor:
    """`(x * scale - mean) / std`, computed on `side`; the current stream waits for the result."""
    ready = torch.cuda.Event()
    if scale is not None:
        x = x * scale
    ready.record()
    side.wait_event(ready)
    with torch.cuda.stream(side):
        out = (x - x.mean()) / x.std()
    torch.cuda.current_stream().wait_stream(side)
    return out
