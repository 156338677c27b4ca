"""Snapshot a model's weights for a checkpoint, flattening them on a side stream.

Flagged but safe (the dismissed verdict): `flat` is written on `copy_stream` and read on the
current stream with no `wait_stream`/`wait_event` in this function, so the linter reports a
missing join (CSL102). But `wait_for_device()`, imported from another module, calls
`torch.cuda.synchronize()`, which orders all of the device's earlier work before the read: at
run time it never races, and `--confirm` dismisses the finding.
"""

from __future__ import annotations

import torch
from checkpoint_utils import wait_for_device
from torch import nn


class WeightSnapshotter:
    """Takes host copies of a model's parameters, flattened on a side stream."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.copy_stream = torch.cuda.Stream()

    def snapshot(self) -> torch.Tensor:
        """All parameters flattened into one CPU tensor, as they are now."""
        self.copy_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy_stream):
            flat = torch.cat([param.detach().reshape(-1) for param in self.model.parameters()])
        wait_for_device()
        return flat.cpu()  # expect: CSL102
