"""A called method that reaches an object's tensor itself (`self.flat`, an item a getter hands
out), not through its arguments, accesses it at the call, on the stream the call runs on: a
broadcast of the updated parameters entered on a side stream races with their update on the
current stream, as it would written inline."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STEP = """
import torch
import torch.distributed as dist

class Optimizer:
    def step(self):
        self.flat.copy_(self.master)
        {before}
        with torch.cuda.stream(self.comm):
            self.broadcast()
        torch.cuda.current_stream().wait_stream(self.comm)

    def broadcast(self):
        {body}
"""

CALL_LINE = 10


def at_call(source: str) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py") if f.line == CALL_LINE]


@pytest.mark.parametrize(
    "body",
    [
        "dist.broadcast(self.flat, src=0)",  # written in place
        "self.flat.mul_(2)",  # written in place by a kernel
        "flat = self.store.get_flat(0)\n        dist.broadcast(flat, src=0)",  # an item a getter hands out
    ],
)
def test_an_objects_tensor_the_callee_reaches_is_accessed_at_the_call(body: str) -> None:
    source = STEP.format(before="pass", body=body)
    if "store" in body:
        source = source.replace("self.flat.copy_(self.master)", "self.store.get_flat(0).copy_(self.master)")
    assert at_call(source) == [("CSL101", CALL_LINE)]


def test_a_wait_before_the_block_orders_it() -> None:
    source = STEP.format(
        before="self.comm.wait_stream(torch.cuda.current_stream())", body="dist.broadcast(self.flat, src=0)"
    )
    assert at_call(source) == []
