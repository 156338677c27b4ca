"""A backward pass (`loss.backward()`, `torch.autograd.backward`) writes every leaf's `.grad` on
the stream current at the call: a side stream that reads a gradient after it must wait first.
Before any backward pass in the function, a `.grad` is not taken as written by anyone
(`attributes-written-by-caller` is off)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

TRAIN = """
import torch

def step(model, loss, side, bufs):
    {before}
    {backward}
    {between}
    with torch.cuda.stream(side):
        for p in model.parameters():
            bufs[p].copy_(p.grad)
    torch.cuda.current_stream().wait_stream(side)
"""


def findings(before: str = "pass", backward: str = "loss.backward()", between: str = "pass") -> list[tuple[str, int]]:
    source = textwrap.dedent(TRAIN).format(before=before, backward=backward, between=between)
    return [(f.code, f.line) for f in lint_source(source, "m.py")]


@pytest.mark.parametrize(
    "backward",
    [
        "loss.backward()",
        "scaler.scale(loss).backward()",
        "torch.autograd.backward([loss])",
        "loss.backward(retain_graph=True)",
    ],
)
def test_a_side_stream_reading_gradients_after_backward_waits_first(backward: str) -> None:
    assert findings(backward=backward) == [("CSL101", 10)]


@pytest.mark.parametrize(
    "between",
    [
        "side.wait_stream(torch.cuda.current_stream())",
        "torch.cuda.synchronize()",
        "torch.cuda.current_stream().synchronize()",
    ],
)
def test_an_ordering_after_the_backward_pass_covers_it(between: str) -> None:
    assert findings(between=between) == []


def test_gradients_read_with_no_backward_pass_in_sight_are_taken_as_ready() -> None:
    assert findings(backward="pass") == []


def test_a_backward_pass_on_the_side_stream_itself_needs_no_wait() -> None:
    assert findings(before="with torch.cuda.stream(side):\n        loss.backward()", backward="pass") == []


def test_two_backward_passes_on_unordered_streams_race_and_are_named_in_words() -> None:
    source = """
import torch

def twice(model, x, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(x).sum().backward()
    model(x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
"""
    found = [(f.code, f.line, f.message) for f in lint_source(source, "m.py")]
    assert [(code, line) for code, line, _ in found] == [("CSL102", 8)]
    assert found[0][2].startswith("'gradients of a backward pass' was written on side stream 'side'")
