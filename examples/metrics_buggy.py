"""Evaluation metrics accumulated on a side stream, so that they overlap the next forward pass.

Hazard: `accuracy` reads the count with `.item()` without joining `metric_stream`; `.item()`
syncs the host with the current stream only, so it may read a count the metric stream has not
finished (CSL102 missing-join); and the count, allocated on the current stream and updated on
`metric_stream`, is freed on return with nothing ordering that stream back (CSL201
missing-record-stream). `mean_loss` has the same missing join, but no test calls it: its
findings stay unexercised.
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
                correct += (logits.argmax(dim=1) == labels).sum()  # expect: CSL201
            logits.record_stream(self.metric_stream)
            labels.record_stream(self.metric_stream)
            seen += labels.numel()
        return correct.item() / seen  # expect: CSL102

    @torch.no_grad()
    def mean_loss(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """The cross-entropy loss averaged over all samples."""
        total = torch.zeros((), device=self.device)
        seen = 0
        for inputs, labels in batches:
            logits = self.model(inputs)
            self.metric_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.metric_stream):
                total += nn.functional.cross_entropy(logits, labels, reduction="sum")  # expect: CSL201
            logits.record_stream(self.metric_stream)
            labels.record_stream(self.metric_stream)
            seen += labels.numel()
        return total.item() / seen  # expect: CSL102
