"""Helpers for writing checkpoints, shared by the training code."""

from __future__ import annotations

import torch


def wait_for_device() -> None:
    """Block until all of the device's queued work is done, before state is read for a checkpoint.

    A device-wide sync: it orders every stream's earlier work before anything launched after it.
    """
    torch.cuda.synchronize()
