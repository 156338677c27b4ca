"""The host waiting for every item's stream, `for state in states: state.stream.synchronize()`
(also under `if state.stream:`), orders what each item's stream wrote before what follows; and
on a path where a stream is None, what a `with torch.cuda.stream(s):` block launched ran on the
stream current there (`stream(None)` enters nothing)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

ACCUMULATE = """
import torch


def run(states, batches):
    for state, b in zip(states, batches):
        with torch.cuda.stream(state.stream):
            state.acc.add_(b)
    {join}
    return [state.acc.item() for state in states]
"""


def _found(source: str, codes: tuple[str, ...] = ("CSL101", "CSL102", "CSL103", "CSL201")) -> list[tuple[str, int]]:
    found = lint_source(textwrap.dedent(source), "m.py")
    return sorted((f.code, f.line) for f in found if f.code in codes)


def _line(source: str, text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(source).splitlines(), 1) if line.strip().startswith(text))


@pytest.mark.parametrize(
    "join",
    [
        "for state in states:\n        state.stream.synchronize()",
        "for state in states:\n        if state.stream:\n            state.stream.synchronize()",
        "for state in states:\n        if state.stream is not None:\n            state.stream.synchronize()",
    ],
)
def test_the_host_waiting_for_every_items_stream_orders_the_reads(join: str) -> None:
    assert _found(ACCUMULATE.format(join=join)) == []


@pytest.mark.parametrize(
    "join",
    ["pass", "for state in states:\n        print(state)\n        state.stream.synchronize()"],
)
def test_no_wait_or_a_loop_doing_more_than_waiting_leaves_the_read_unordered(join: str) -> None:
    source = ACCUMULATE.format(join=join)
    assert _found(source) == [("CSL102", _line(source, "return ["))]


OPTIONAL = """
import torch


def f(x, s):
    with torch.cuda.stream(s):
        y = x * 2
    if s is None:
        return y + 1
    {join}
    return y + 1
"""


def test_where_the_stream_is_none_the_block_ran_on_the_current_stream() -> None:
    """The read's ordering only (CSL102); the block's memory, from `s`'s pool, is another matter."""
    assert _found(OPTIONAL.format(join="torch.cuda.current_stream().wait_stream(s)"), ("CSL102",)) == []
    assert _found(OPTIONAL.format(join="pass"), ("CSL102",)) == [("CSL102", 11)]
