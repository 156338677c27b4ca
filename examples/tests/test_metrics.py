"""The side-stream accuracy counts what a plain CPU loop counts. `Evaluator.mean_loss` is
deliberately left untested: its findings are the unexercised case of `csan-lint --confirm`."""

from __future__ import annotations

import metrics_buggy
import metrics_fixed
import pytest
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [metrics_buggy, metrics_fixed], ids=["buggy", "fixed"])
def test_accuracy_counts_correct_predictions(module):
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    batches = [(torch.randn(10, 6), torch.randint(0, 3, (10,))) for _ in range(4)]
    with torch.no_grad():
        predictions = [(model(inputs).argmax(dim=1), labels) for inputs, labels in batches]
        correct = sum(int((predicted == labels).sum()) for predicted, labels in predictions)
    assert 0 < correct < 40  # a count that a wrong accumulation would miss
    evaluator = module.Evaluator(model.cuda())
    accuracy = evaluator.accuracy([(inputs.cuda(), labels.cuda()) for inputs, labels in batches])
    assert accuracy == pytest.approx(correct / 40)
