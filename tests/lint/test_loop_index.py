"""A counted loop's index decides the tests of its body: a record made under `if i < n:` in
one pass of `for i in range(n + 1)` is seen by a wait under `if i > 1:` in the next."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.loopindex import IndexFacts, counted_loop, index_fact

RING = """
import torch

def ring(n, streams):
    done = torch.cuda.Event()
    for i in range({bound}):
        if i > {waits_after}:
            streams[i % 2].wait_event(done)
        if i < {records_before}:
            streams[i % 2].record_event(done)
"""


def codes(source: str) -> set[tuple[str, int]]:
    return {(finding.code, finding.line) for finding in lint_source(textwrap.dedent(source), "m.py")}


@pytest.mark.parametrize(
    ("bound", "waits_after", "records_before"),
    [("n + 1", 1, "n"), ("n + 1", 0, "n"), ("n", 0, "n - 1"), ("1, n", 1, "n - 1")],
)
def test_a_wait_after_a_record_made_in_every_pass_but_the_last_is_ordered(
    bound: str, waits_after: int, records_before: str
) -> None:
    source = RING.format(bound=bound, waits_after=waits_after, records_before=records_before)
    assert codes(source) == set()


@pytest.mark.parametrize(
    ("bound", "waits_after", "records_before"),
    [("n + 1", -1, "n"), ("n + 1", 1, "n - 1"), ("n", 0, "n"), ("n + 1", 1, "m")],
)
def test_a_wait_on_a_pass_the_record_may_have_skipped_is_flagged(
    bound: str, waits_after: int, records_before: str
) -> None:
    source = RING.format(bound=bound, waits_after=waits_after, records_before=records_before)
    assert ("CSL401", 8) in codes(source)


def test_a_loop_whose_body_does_not_test_its_index_is_not_counted() -> None:
    loop = cst.parse_statement("for i in range(n):\n    f(i)\n")
    assert isinstance(loop, cst.For)
    assert counted_loop(loop) is None


@pytest.mark.parametrize(
    ("test", "value", "at_least", "last", "expected"),
    [
        ("i > 1", 1, 1, False, False),
        ("i > 1", None, 2, False, True),
        ("i >= 3", None, 2, False, None),
        ("i == 0", None, 1, True, False),
        ("i < n", None, 2, False, True),
        ("i < n", None, 2, True, False),
        ("i == n", 0, 0, True, True),
        ("j < n", None, 2, False, None),
    ],
)
def test_index_fact_decides_tests_of_the_index(
    test: str, value: int | None, at_least: int, last: bool, expected: bool | None
) -> None:
    facts = IndexFacts("i", value, at_least, "n", last)
    assert index_fact(cst.parse_expression(test), facts) is expected
