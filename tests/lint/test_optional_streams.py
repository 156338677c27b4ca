"""A stream that may be None: `torch.cuda.stream(None)` changes nothing, so a block entered on
`s` runs on `s` only where `s is not None`; orderings made under that test
(`if s is not None: s.wait_stream(...)`) hold in the block, and accesses made in it exist only
on those paths."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


REDUCE = """
import torch

def reduce(grad, side):
    y = grad * 2
    {fork}
    with torch.cuda.stream(side):
        z = y * 3
    {join}
    return z.sum()
"""
FORK = "if side is not None:\n        side.wait_stream(torch.cuda.current_stream())"
JOIN = "if side is not None:\n        torch.cuda.current_stream().wait_stream(side)"


@pytest.mark.parametrize(
    ("fork", "join"),
    [(FORK, "torch.cuda.current_stream().wait_stream(side)"), (FORK, JOIN)],
)
def test_orderings_made_where_the_stream_is_not_none_hold_in_its_block(fork: str, join: str) -> None:
    assert findings(REDUCE.format(fork=fork, join=join)) == []


def test_without_the_fork_the_read_is_unordered() -> None:
    assert ("CSL101", 8) in findings(REDUCE.format(fork="", join=JOIN))


def test_a_fork_under_another_test_does_not_count() -> None:
    fork = "if grad is not None:\n        side.wait_stream(torch.cuda.current_stream())"
    assert ("CSL101", 9) in findings(REDUCE.format(fork=fork, join=JOIN))
