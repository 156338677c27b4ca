"""Evaluation metrics accumulated on a side stream, so that they overlap the next forward pass.

Fixed: before reading the accumulated value with `.item()`, the current stream waits for
`metric_stream` (`wait_stream`): `.item()` then sees the finished value, and the accumulator is
freed on return only after the metric stream's work on it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


class Evaluator:
    """Top-1 accuracy and mean loss of a classifier over labelled batches."""

    def __init__(self, model: nn.Module, device: str = "cuda") -> None:
        self.model = model
        self.device = device
        self.metric_stream = torch.cuda.Stream()

    @torch.no_grad()
    def accuracy(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """The fraction of samples whose top-scoring class is the label."""
        correct = torch.zeros((), dtype=torch.long, device=self.device)
        seen = 0
        for inputs, labels in batches:
            logits = self.model(inputs)
            self.metric_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.metric_stream):
                correct += (logits.argmax(dim=1) == labels).sum()
            logits.record_stream(self.metric_stream)
            labels.record_stream(self.metric_stream)
            seen += labels.numel()
        torch.cuda.current_stream().wait_stream(self.metric_stream)
        return correct.item() / seen

    @torch.no_grad()
    def mean_loss(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """The cross-entropy loss averaged over all samples."""
        total = torch.zeros((), device=self.device)
        seen = 0
        for inputs, labels in batches:
            logits = self.model(inputs)
            self.metric_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.metric_stream):
                total += nn.functional.cross_entropy(logits, labels, reduction="sum")
            logits.record_stream(self.metric_stream)
            labels.record_stream(self.metric_stream)
            seen += labels.numel()
        torch.cuda.current_stream().wait_stream(self.metric_stream)
        return total.item() / seen
