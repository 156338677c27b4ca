"""A stream the function creates is ordered after nothing until it waits
(`fresh-streams-read-callers-data`): data whose producer is not seen, read there before any
wait or host sync, may still be being written by the caller's stream. Any ordering of the new
stream after the caller's, or a host sync, settles it."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import FRESH_STREAMS_READ_CALLERS_DATA, Assumptions
from csan_lint.lint.engine import lint_source

ON = Assumptions.from_switches([(FRESH_STREAMS_READ_CALLERS_DATA, True)])

WARM_UP = """
import torch

class Runner:
    def warm_up(self, x, flag):
        side = torch.cuda.Stream()
        {before}
        with torch.cuda.stream(side):
            y = self.model(torch.relu(x)) + self.bias.data
            if flag:
                y = y + 1
        torch.cuda.current_stream().wait_stream(side)
        return y
"""


def findings(before: str, assumptions: Assumptions = ON) -> list[tuple[str, int, tuple[str, ...]]]:
    source = textwrap.dedent(WARM_UP.format(before=before))
    return sorted((f.code, f.line, f.assumptions) for f in lint_source(source, "m.py", assumptions=assumptions))


def test_reads_on_a_new_stream_before_any_wait_race_with_the_callers_stream() -> None:
    rests = (FRESH_STREAMS_READ_CALLERS_DATA,)
    assert findings("pass") == [("CSL101", 9, rests), ("CSL101", 9, rests)]


def test_off_by_default() -> None:
    assert findings("pass", Assumptions()) == []


@pytest.mark.parametrize(
    "before",
    [
        "side.wait_stream(torch.cuda.current_stream())",
        "side.wait_event(torch.cuda.current_stream().record_event())",
        "torch.cuda.synchronize()",
        "torch.cuda.current_stream().synchronize()",
    ],
)
def test_an_ordering_after_the_callers_stream_or_a_host_sync_settles_it(before: str) -> None:
    assert findings(before) == []


def test_a_stream_passed_in_is_not_judged_so() -> None:
    source = textwrap.dedent(WARM_UP.format(before="pass")).replace("side = torch.cuda.Stream()", "side = self.side")
    assert lint_source(source, "m.py", assumptions=ON) == []


def test_a_parameter_not_known_for_a_tensor_is_not_judged() -> None:
    source = textwrap.dedent(WARM_UP.format(before="pass")).replace("torch.relu(x)", "x")
    assert [(f.code, f.line) for f in lint_source(source, "m.py", assumptions=ON)] == [("CSL101", 9)]  # the attribute
