"""Tensors a function did not produce: parameters were written by the caller on the stream
current at entry; a caller in the linted code checks its own arguments instead."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int, str]]:
    return sorted((f.code, f.line, f.message) for f in lint_source(textwrap.dedent(source), "m.py"))


PARAMETER = """
import torch

def f(x: torch.Tensor, s: torch.cuda.Stream) -> torch.Tensor:
    {before}
    with torch.cuda.stream(s):
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    return y
"""


def test_a_tensor_parameter_read_on_a_side_stream_with_no_wait_is_flagged() -> None:
    assert findings(PARAMETER.format(before="pass")) == [
        (
            "CSL101",
            7,
            "'x' was written by the caller on the current stream and is read on side stream 's' "
            "with no wait_stream/wait_event between them",
        )
    ]


@pytest.mark.parametrize(
    "before",
    ["s.wait_stream(torch.cuda.current_stream())", "torch.cuda.synchronize()", "x = torch.ones(4)"],
)
def test_a_wait_or_a_rebinding_before_the_block_leaves_nothing_to_flag(before: str) -> None:
    assert findings(PARAMETER.format(before=before).replace("torch.ones(4)", "torch.ones(4, pin_memory=True)")) == []


def test_an_unannotated_parameter_may_be_anything_and_is_taken_as_ready() -> None:
    assert findings(PARAMETER.format(before="pass").replace("x: torch.Tensor", "x")) == []


def test_a_function_whose_every_caller_forks_the_stream_leaves_the_check_to_them() -> None:
    """A caller that does not fork is reported where it passes its tensor, and the callee where
    it reads the caller's tensor: its other callers, outside the module, may not fork either."""
    source = PARAMETER.format(before="pass") + textwrap.dedent(
        """
        def caller(s):
            a = torch.ones(4, device="cuda")
            {wait}
            return f(a, s)
        """
    )
    assert findings(source.format(wait="s.wait_stream(torch.cuda.current_stream())")) == []
    assert [(code, line) for code, line, _ in findings(source.format(wait="pass"))] == [("CSL101", 7), ("CSL101", 14)]


def test_a_side_stream_waiting_on_an_event_of_the_object_is_ordered_after_the_callers_writes() -> None:
    """`self.ready` is recorded by another method, after the tensors the caller hands in."""
    source = PARAMETER.format(before="pass").replace(
        "with torch.cuda.stream(s):", "s.wait_event(self.ready)\n    with torch.cuda.stream(s):"
    )
    source = source.replace("def f(x", "def f(self, x")
    assert findings(source) == []
    assert [code for code, _, _ in findings(source.replace("self.ready", "ready"))] == ["CSL101"]


INHERITED = """
import torch

class Base:
    def fork(self):
        self.s.wait_stream(torch.cuda.current_stream())

class Child(Base):
    def fork(self):
        pass

    def step(self, x):
        y = x * 2
        {call}
        with torch.cuda.stream(self.s):
            z = y + 1
        torch.cuda.current_stream().wait_stream(self.s)
        return z

class Other(Base):
    def step(self, x):
        y = x * 2
        self.fork()
        with torch.cuda.stream(self.s):
            z = y + 1
        torch.cuda.current_stream().wait_stream(self.s)
        return z
"""


@pytest.mark.parametrize(("call", "flagged"), [("super().fork()", False), ("self.fork()", True), ("pass", True)])
def test_super_calls_and_inherited_methods_are_followed(call: str, flagged: bool) -> None:
    found = [(code, line) for code, line, _ in findings(INHERITED.format(call=call))]
    assert found == ([("CSL101", 16)] if flagged else [])


def test_a_function_nested_in_the_caller_is_followed() -> None:
    source = """
    import torch

    def f(x, s):
        def fork(side):
            side.wait_stream(torch.cuda.current_stream())

        y = x * 2
        {call}
        with torch.cuda.stream(s):
            z = y + 1
        torch.cuda.current_stream().wait_stream(s)
        return z
    """
    assert findings(source.format(call="fork(s)")) == []
    assert [(code, line) for code, line, _ in findings(source.format(call="pass"))] == [("CSL101", 11)]


RETURNED = """
import torch

def fill(x, s):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream({stream}):
        x.add_(1)
        {inside}
    {after}
"""


def test_side_stream_work_on_the_callers_tensor_pending_at_return_is_flagged() -> None:
    assert findings(RETURNED.format(stream="side", inside="pass", after="pass")) == [
        (
            "CSL102",
            8,
            "'x' was written on side stream 'side' and is used on the caller's stream after 'fill' "
            "returns with no wait_stream/wait_event between them",
        )
    ]


@pytest.mark.parametrize(
    ("stream", "inside", "after"),
    [
        ("side", "pass", "torch.cuda.current_stream().wait_stream(side)"),  # joined
        ("side", "done = side.record_event()", "return done"),  # an event handed back
        ("side", "pending = Future(); pending.set_result(x)", "return pending"),  # an object that may hold one
        ("s", "pass", "pass"),  # the caller's own stream, which it can join
    ],
)
def test_work_joined_or_handed_back_at_return_is_fine(stream: str, inside: str, after: str) -> None:
    assert findings(RETURNED.format(stream=stream, inside=inside, after=after)) == []


ENTERED = """
import torch

class Reducer:
    def hook(self, grad):
        with torch.cuda.stream(self.post):
            self.reduce(grad)
        {elsewhere}

    def reduce(self, grad):
        out = grad * 2
        self.comm.wait_stream(self.post)
        with torch.cuda.stream(self.comm):
            total = out.sum()
        torch.cuda.current_stream().wait_stream(self.comm)
        return total
"""


def test_a_helper_always_called_inside_a_stream_block_is_entered_on_that_stream() -> None:
    assert findings(ENTERED.format(elsewhere="pass")) == []


def test_a_helper_also_called_outside_the_block_is_entered_on_the_callers_stream() -> None:
    found = [(code, line) for code, line, _ in findings(ENTERED.format(elsewhere="self.reduce(grad)"))]
    # entered on the current stream, `total` comes from a pool that never waited for it
    assert found == [("CSL101", 14), ("CSL201", 16)]


def test_the_function_a_hook_is_defined_in_is_not_its_caller() -> None:
    """`def pack(...)` inside `__init__`, registered as a hook: `__init__` forks the stream, but
    it does not call `pack`, so the hook's read of the caller's tensor is still judged."""
    source = """
    import torch

    class Offload:
        def __init__(self):
            self.s = torch.cuda.Stream()
            self.s.wait_stream(torch.cuda.current_stream())

            def pack(x: torch.Tensor):
                with torch.cuda.stream(self.s):
                    return x.to("cpu", non_blocking=True)

            self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, None)
    """
    assert [code for code, _, _ in findings(source)] == ["CSL101"]


FORKED_BY_CALLER = """
import torch

class Reducer:
    def __init__(self):
        self._streams = {{"post": torch.cuda.Stream()}}

    def hook(self, grad: torch.Tensor) -> None:
        with torch.cuda.stream(self._streams["post"]):
            grad.div_(2)

    def reduce(self, grad: torch.Tensor) -> None:
        {fork}
        self.hook(grad)
"""


@pytest.mark.parametrize(
    ("fork", "expected"),
    [
        ('self._streams["post"].wait_stream(torch.cuda.current_stream())', []),  # a stream of an item
        ("pass", [("CSL101", 10), ("CSL101", 14)]),
    ],
)
def test_a_caller_that_forks_the_stream_orders_the_callees_use(fork: str, expected: list) -> None:
    assert [
        (code, line) for code, line, _ in findings(FORKED_BY_CALLER.format(fork=fork)) if code == "CSL101"
    ] == expected
