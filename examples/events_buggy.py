"""Standardizes features on a side stream, which waits for the features through an event.

Hazard: the event is recorded only when the features are rescaled first. Without a scale the
side stream waits on an event that was never recorded: the wait orders nothing, and the side
stream may read the features before the current stream has written them (CSL401
wait-unrecorded-event). The read itself is of a tensor parameter, which the caller wrote on the
current stream: flagged too (CSL101), and confirmed as a read-after-write race.
"""

from __future__ import annotations

import torch


def standardize_async(x: torch.Tensor, side: torch.cuda.Stream, scale: float | None = None) -> torch.Tensor:
    """`(x * scale - mean) / std`, computed on `side`; the current stream waits for the result."""
    ready = torch.cuda.Event()
    if scale is not None:
        x = x * scale
        ready.record()
    side.wait_event(ready)  # expect: CSL401
    with torch.cuda.stream(side):
        out = (x - x.mean()) / x.std()  # expect: CSL101
    torch.cuda.current_stream().wait_stream(side)
    return out  # expect: CSL201
