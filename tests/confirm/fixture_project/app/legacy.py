"""Unexercised: no sanitized test calls it (one runs it with the sanitizer off)."""

from __future__ import annotations

import torch


def old_shifted(x: torch.Tensor) -> torch.Tensor:
    side = torch.cuda.Stream()
    doubled = x * 2
    with torch.cuda.stream(side):
        result = doubled + 1
    torch.cuda.current_stream().wait_stream(side)
    return result
