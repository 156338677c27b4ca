"""A sync the linter cannot see from the modules that call it."""

from __future__ import annotations

import torch


def settle() -> None:
    """Orders all of the device's earlier work before anything launched after it."""
    torch.cuda.synchronize()
