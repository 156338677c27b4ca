"""A function nested in another is called by it: what the enclosing function ordered before
each call is the closure's entry, as for a module-level helper (lint/streamflow.py)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

TRAIN = """
import torch


def train(batches, side: torch.cuda.Stream, other: torch.cuda.Stream):
    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(side):
            y = x * 2
        return y

    for batch in batches:
        x = batch.to("cuda")
        {wait}
        y = step(x)
        torch.cuda.current_stream().wait_stream(side)
        print(y.sum())
"""


def findings(wait: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(TRAIN.format(wait=wait))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        ("side.wait_stream(torch.cuda.current_stream())", []),
        ("pass", [("CSL101", 8)]),
        ("other.wait_stream(torch.cuda.current_stream())", [("CSL101", 8)]),
    ],
)
def test_the_enclosing_functions_wait_before_the_call_orders_the_closure(
    wait: str, expected: list[tuple[str, int]]
) -> None:
    assert findings(wait) == expected


def test_a_closure_also_called_where_nothing_waits_keeps_its_finding() -> None:
    source = TRAIN.format(wait="side.wait_stream(torch.cuda.current_stream())") + "    step(batches[0])\n"
    assert sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py")) == [("CSL101", 8)]


STATE = """
import torch


def step(state, x: torch.Tensor):
    with torch.cuda.stream(state.stream):
        return x * 2


def run(states, x: torch.Tensor):
    for state in states:
        {wait}
        y = step(state, x)
        torch.cuda.current_stream().wait_stream(state.stream)
        print(y)
"""


@pytest.mark.parametrize(
    ("wait", "flagged"),
    [("state.stream.wait_stream(torch.cuda.current_stream())", False), ("pass", True)],
)
def test_a_wait_of_an_arguments_stream_orders_the_callee_that_uses_it(wait: str, flagged: bool) -> None:
    """`s.stream` ordered at the call is the callee's `state.stream`, its parameter's."""
    found = lint_source(textwrap.dedent(STATE.format(wait=wait)), "m.py")
    assert (("CSL101", 7) in [(f.code, f.line) for f in found]) == flagged
