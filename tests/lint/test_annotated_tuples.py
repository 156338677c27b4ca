"""Items of a returned tuple that the callee's annotation says are Python values are no tensors
at the caller (`-> tuple[Tensor, int]`), however the caller unpacks them."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

CALLER = """
import torch
from contextlib import nullcontext


def run(batches, states, criterion, totals: list) -> None:
    def measure(outputs: torch.Tensor, targets: torch.Tensor):
        loss = criterion(outputs, targets)
        total = targets.size(0)
        return loss, total

    def step(state, inputs: torch.Tensor, targets: torch.Tensor) -> {annotation}:
        ctx = torch.cuda.stream(state.stream) if state.stream else nullcontext()
        with ctx:
            outputs = state.model(inputs)
            loss, total = measure(outputs, targets)
            return loss, total

    for i, state in enumerate(states):
        inputs, targets = batches[i]
        loss, total = step(state, inputs, targets)
        with torch.cuda.stream(state.stream):
            state.acc.add_(loss)
        totals[i] += total
"""


def findings(annotation: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(CALLER.format(annotation=annotation))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


@pytest.mark.parametrize("annotation", ["tuple[torch.Tensor, int]", "Tuple[torch.Tensor, int | None]"])
def test_an_item_annotated_as_a_number_is_no_tensor(annotation: str) -> None:
    assert [found for found in findings(annotation) if found[1] == 24] == []


@pytest.mark.parametrize("annotation", ["tuple", "tuple[torch.Tensor, ...]", "tuple[torch.Tensor, torch.Tensor]"])
def test_an_item_the_annotation_does_not_call_a_number_stays_a_possible_tensor(annotation: str) -> None:
    assert ("CSL102", 24) in findings(annotation)
