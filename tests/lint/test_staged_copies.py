"""A function that stages device gradients to the host on a side stream and hands the host
copies back: testing whether a copy was made (`is not None`) reads no data, and an event of the
caller's (an item of a parameter, `state["done"][i]`) recorded after the copies lets the caller
join them, so neither is a finding; reading the copy's data on the host before a sync still is."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STAGE = """
import torch

def stage(state, idx, grad):
    gs = state["stream"]
    state["compute_done"][idx].record()
    out = None
    with torch.cuda.stream(gs):
        gs.wait_event(state["compute_done"][idx])
        if grad is not None:
            out = grad.to("cpu", non_blocking=True)
        state["copy_done"][idx].record()
    {after}
    return out
"""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


@pytest.mark.parametrize(
    "after",
    ["pass", "if out is not None and grad is not None:\n        state['copy_done'][idx].synchronize()"],
)
def test_identity_tests_and_the_callers_event_leave_nothing_to_report(after: str) -> None:
    assert findings(STAGE.format(after=after)) == []


def test_reading_the_copy_on_the_host_before_a_sync_is_still_flagged() -> None:
    assert ("CSL301", 13) in findings(STAGE.format(after="total = out.sum().item()"))
