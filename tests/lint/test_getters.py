"""A tensor a method of an object the function did not make hands out (`self.store.flat(k)`)
is that object's state, like `self.x`: side-stream writes to it left unjoined race with the
caller's next use of what the object hands out (CSL102); a fresh tensor is not state."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.getters import getter_holder


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


OPTIMIZER = """
import torch
import torch.distributed as dist

class Optimizer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def step(self, master):
        param = self.store.flat(0)
        param.copy_(master)
        torch.cuda.synchronize()
        with torch.cuda.stream(self.side):
            self.publish()

    def publish(self):
        handles = []
        for rank in range(4):
            {bind}
            handles.append(dist.broadcast({arg}, src=rank, async_op=True))
        for handle in handles:
            handle.wait()
        {join}
"""


def bound(getter: str) -> dict[str, str]:
    """The getter's tensor bound to a name, then written."""
    return {"bind": f"param = {getter}", "arg": "param"}


def passed(getter: str) -> dict[str, str]:
    """The getter's result written as the call's argument."""
    return {"bind": "pass", "arg": getter}


@pytest.mark.parametrize(
    "written",
    [bound("self.store.flat(rank)"), bound("self.store.shards.flat(rank=rank)"), passed("self.store.flat(rank)")],
)
def test_a_getters_tensor_written_by_a_helper_run_on_a_side_stream_and_never_joined_is_flagged(
    written: dict[str, str],
) -> None:
    found = lint_source(textwrap.dedent(OPTIMIZER.format(join="", **written)), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL102", 11), ("CSL102", 20)]  # the next step's writes
    assert all("'self.store[]'" in f.message for f in found)


def test_a_host_sync_the_helper_ends_with_orders_it() -> None:
    assert findings(OPTIMIZER.format(join="torch.cuda.synchronize()", **bound("self.store.flat(rank)"))) == []


@pytest.mark.parametrize(
    "written",
    [bound("self.store.flat(rank).clone()"), bound("torch.empty(8, device='cuda')"), passed("torch.empty(8)")],
)
def test_a_fresh_tensor_is_not_the_objects_state(written: dict[str, str]) -> None:
    assert findings(OPTIMIZER.format(join="", **written)) == []


@pytest.mark.parametrize(
    ("expression", "holder"),
    [
        ("self.store.flat(k)", "self.store[]"),
        ("self.store.shards.flat(k)", "self.store[]"),
        ("bucket.buffers.flat()", "bucket[]"),
        ("self.flat(k)", None),  # the object's own method: followed, or unknown
        ("self.store.view(-1)", None),  # a view: the object's tensor itself
        ("self.store.clone()", None),  # a method every tensor has: a new tensor
        ("other.buffers.flat()", None),  # not a parameter: a module or a global
        ("self.store[0]", None),
    ],
)
def test_the_holder_of_a_getters_result(expression: str, holder: str | None) -> None:
    assert getter_holder(cst.parse_expression(expression), {"bucket"}) == holder
