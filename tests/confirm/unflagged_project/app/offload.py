"""Copies activations to the host on a side stream. The linter takes the unannotated `activation`
as ready, so it has no finding here; the sanitizer sees the caller's producer race with the copy."""

from __future__ import annotations

import torch


class Offloader:
    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()

    def offload(self, activation):  # unannotated: the linter takes it as ready
        with torch.cuda.stream(self.stream):
            host = activation.to("cpu", non_blocking=True)
        self.stream.synchronize()
        return host
