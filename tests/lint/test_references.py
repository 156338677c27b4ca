"""Handing tensors around launches no kernel: a tuple built from them (also by `+`), and a
choice between them on a Python test, are references; arithmetic on them is a use."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

ALLOCATED = """
import torch


def dispatch(n: int, side: torch.cuda.Stream, kept: tuple, scales):
    with torch.cuda.stream(side):
        x = torch.empty(n, device="cuda")
    held = {expression}
    return held
"""


def codes(expression: str) -> list[str]:
    source = textwrap.dedent(ALLOCATED.format(expression=expression))
    return sorted({f.code for f in lint_source(source, "m.py") if f.line == 8})


@pytest.mark.parametrize(
    "expression",
    [
        "kept + (x,)",
        "[x] + list(kept)",
        "(x, scales) if scales is not None else x",
        "kept + ((x, scales) if scales is not None else (x,))",
    ],
)
def test_holding_a_side_streams_tensor_is_no_use_of_it(expression: str) -> None:
    assert codes(expression) == []


@pytest.mark.parametrize(
    "expression", ["x + 1", "(x * 2, scales) if scales is not None else x", "x if x.sum() > 0 else x"]
)
def test_computing_with_it_on_the_current_stream_is(expression: str) -> None:
    assert "CSL102" in codes(expression)
