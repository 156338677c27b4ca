"""A view shares its base's storage: `record_stream` on a view (`x.view(-1)`, `x[0]`) records the
base's block, and a view handed to the caller hands the block over (CSL201)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


SIDE_USE = """
import torch

def producer(s, out):
    x = torch.randn(8, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out.copy_(x)
    {record}
    del x
"""


@pytest.mark.parametrize("view", ["x.view(-1)", "x[0]", "x[:4].t()", "x.data"])
def test_a_record_of_a_view_records_the_base(view: str) -> None:
    assert findings(SIDE_USE.format(record=f"{view}.record_stream(s)")) == []


def test_a_record_of_another_tensor_does_not_protect_the_base() -> None:
    assert findings(SIDE_USE.format(record="out.view(-1).record_stream(s)")) == [("CSL201", 8)]


LOAD = """
import torch

def load(batch, s):
    with torch.cuda.stream(s):
        x = batch.to("cuda", non_blocking=True)
    torch.cuda.current_stream().wait_stream(s)
    {record}
    return {returned}
"""


@pytest.mark.parametrize("returned", ["x.view(-1)", "x[1:]", "(x[0], x[1])"])
def test_a_view_of_a_side_stream_tensor_handed_to_the_caller_is_flagged(returned: str) -> None:
    found = lint_source(textwrap.dedent(LOAD.format(record="pass", returned=returned)), "m.py")
    assert {(f.code, f.line) for f in found} == {("CSL201", 9)}
    assert "'x' was allocated on side stream 's'" in found[0].message


def test_a_view_recorded_on_the_callers_stream_is_not_flagged() -> None:
    record = "x[0].record_stream(torch.cuda.current_stream())"
    assert findings(LOAD.format(record=record, returned="x")) == []
    assert findings(LOAD.format(record=record, returned="x.view(-1)")) == []
