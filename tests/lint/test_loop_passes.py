"""Loops that provably run at least once: the state before the first pass does not reach the
exit, so an ordering made in every pass holds after the loop."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.interpret import runs_at_least_once
from csan_lint.lint.ordering import HazardKind
from csan_lint.lint.streamflow import analyse

WAIT_IN_LOOP = """
import torch

def f(s):
    y = torch.ones(4, device="cuda")
    for _ in {iterable}:
        s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        z = y + 1
"""


def _raw_lines(source: str) -> set[int]:
    source = textwrap.dedent(source)
    flow = analyse(cst.parse_module(source), "m.py")
    return {flow.line(h.access.node) for h in flow.hazards if h.kind is HazardKind.READ_AFTER_WRITE}


@pytest.mark.parametrize("iterable", ["range(2)", "range(1, 3)", "[0, 1]", "(s,)", "enumerate([s])"])
def test_a_wait_in_a_loop_that_runs_at_least_once_orders_the_read(iterable: str) -> None:
    assert _raw_lines(WAIT_IN_LOOP.format(iterable=iterable)) == set()


@pytest.mark.parametrize("iterable", ["range(n)", "range(0)", "range(3, 3)", "[]", "[*xs]", "xs"])
def test_a_wait_in_a_loop_that_may_run_zero_times_orders_nothing(iterable: str) -> None:
    source = WAIT_IN_LOOP.replace("def f(s):", "def f(s, n, xs):").format(iterable=iterable)
    assert _raw_lines(source) == {9}


def test_a_break_in_the_first_pass_still_reaches_the_exit() -> None:
    source = """
    import torch

    def f(s, c):
        y = torch.ones(4, device="cuda")
        for _ in range(2):
            if c:
                break
            s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            z = y + 1
    """
    assert _raw_lines(source) == {11}


@pytest.mark.parametrize(
    ("iterable", "expected"),
    [("range(-1, 2)", True), ("range(4, 0, -1)", True), ("range(0, 4, -1)", False), ("reversed((1,))", True)],
)
def test_runs_at_least_once_reads_literal_ranges(iterable: str, expected: bool) -> None:
    assert runs_at_least_once(cst.parse_expression(iterable)) is expected


HANDLES = """
import torch
import torch.distributed as dist

def f(s, group):
    y = torch.ones(4, device="cuda")
    reqs = start_exchange(y, group)
    with torch.cuda.stream(s):
        {waits}
        z = y + 1
"""


@pytest.mark.parametrize(
    "waits",
    [
        "for req in reqs:\n            req.wait()",
        "for i in range(n):\n            for j in range(m):\n                reqs[i][j].wait()",
    ],
)
def test_a_loop_that_only_waits_handles_waits_them_all(waits: str) -> None:
    assert _raw_lines(HANDLES.format(waits=waits)) == set()


@pytest.mark.parametrize(
    "waits",
    [
        "for req in reqs:\n            req.wait()\n            g(req)",  # does more than wait
        "for req in reqs:\n            if req.ready:\n                req.wait()",
        "pass",
    ],
)
def test_a_loop_that_does_more_than_wait_may_still_run_zero_times(waits: str) -> None:
    source = textwrap.dedent(HANDLES.format(waits=waits))
    [use] = [number for number, line in enumerate(source.splitlines(), 1) if "z = y + 1" in line]
    assert _raw_lines(source) == {use}
