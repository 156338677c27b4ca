"""What a function returns may hand its caller a way to join the side-stream work it leaves
pending (an event, a future, an object that holds one), so that work is left to the caller. A
local bound before that work was launched, and not touched after, holds none of it: the
optimizer's `loss = closure()` returned by `step()` is such a value."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STEP = """
import torch

class Optimizer:
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for p in self.params:
            with torch.cuda.stream(self.stream):
                p.copy_(self.host[p], non_blocking=True)
        {after}
        return loss
"""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


def test_a_value_made_before_the_side_work_does_not_hand_it_back() -> None:
    assert findings(STEP.format(after="pass")) == [("CSL102", 11)]


@pytest.mark.parametrize(
    "after",
    [
        "loss = self.stream.record_event()",  # rebound to an event of the work
        "loss.attach(self.stream.record_event())",  # given one
        "self.remember(loss)",  # handed to code that may put one in it
    ],
)
def test_a_value_touched_after_the_side_work_may_hand_it_back(after: str) -> None:
    assert findings(STEP.format(after=after)) == []


def test_the_stream_itself_hands_the_work_back() -> None:
    source = """
    import torch

    def write(x):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.mul_(2)
        return side
    """
    assert findings(source) == []


def test_the_join_still_orders_the_work() -> None:
    assert findings(STEP.format(after="torch.cuda.current_stream().wait_stream(self.stream)")) == []
