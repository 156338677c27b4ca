"""SGD on a least-squares model that keeps an exponential moving average (EMA) of the weights,
updated on a side stream so that it overlaps the next step.

Hazard: the EMA of step k reads `self.weights` on `ema_stream` while step k+1 overwrites them in
place on the compute stream, which never waits for `ema_stream`: the EMA may average in the
weights of step k+1 instead of k (CSL103 cross-stream-overwrite, a write-after-read race).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class EMATrainer:
    """Fits `inputs @ weights ~ targets` by SGD; `ema_weights` trails `weights`."""

    def __init__(self, weights: torch.Tensor, lr: float = 0.1, decay: float = 0.9) -> None:
        self.weights = weights
        self.ema_weights = weights.clone()
        self.lr = lr
        self.decay = decay
        self.ema_stream = torch.cuda.Stream()

    def fit(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Take one step per batch; return the EMA weights, ready on the current stream."""
        for inputs, targets in batches:
            residual = inputs @ self.weights - targets
            grad = inputs.t() @ residual / len(inputs)
            self.weights.sub_(self.lr * grad)  # expect: CSL103
            self.ema_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.ema_stream):
                self.ema_weights.lerp_(self.weights, 1 - self.decay)
        torch.cuda.current_stream().wait_stream(self.ema_stream)
        return self.ema_weights
