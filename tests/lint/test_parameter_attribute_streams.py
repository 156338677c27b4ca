"""A called function's stream reached through a parameter's attribute (`state.stream`) is, at
the call, the same attribute of the argument (`s.stream`): what the function returns written
there is ordered or not in the caller's terms, not taken as unseen code's result."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STEP = """
import torch


def step(state, x):
    with torch.cuda.stream(state.stream):
        loss = torch.relu(x).sum()
    return loss


def caller(s, x):
    loss = step(s, x)
    {use}
"""


def _found(use: str) -> list[tuple[str, int, str]]:
    source = textwrap.dedent(STEP.format(use=use))
    return sorted((f.code, f.line, f.message) for f in lint_source(source, "m.py") if f.line > 10)


@pytest.mark.parametrize(
    "use",
    [
        "with torch.cuda.stream(s.stream):\n        s.acc.add_(loss)",
        "torch.cuda.current_stream().wait_stream(s.stream)\n    s.acc.add_(loss)",
    ],
)
def test_a_result_used_on_its_own_stream_or_after_a_join_is_ordered(use: str) -> None:
    assert _found(use) == []


def test_a_result_used_on_the_current_stream_without_a_join_is_flagged_in_the_callers_terms() -> None:
    [(code, line, message)] = _found("s.acc.add_(loss)")
    assert (code, line) == ("CSL102", 13)
    assert "'loss' was written on side stream 's.stream'" in message
