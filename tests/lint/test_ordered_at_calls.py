"""A function entered on a side stream by every caller reads its arguments there; what the
callers wrote them on is ordered before that stream when each caller made it wait first, and
the function's reads are then no race. One caller that does not wait keeps the finding."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

REDUCER = """
import torch

class Reducer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def reduce(self, grad: torch.Tensor):
        {first}
        with torch.cuda.stream(self.side):
            self.scale(grad)
        torch.cuda.current_stream().wait_stream(self.side)

    def reduce_again(self, grad: torch.Tensor):
        {second}
        with torch.cuda.stream(self.side):
            self.scale(grad)
        torch.cuda.current_stream().wait_stream(self.side)

    def scale(self, tensor: torch.Tensor):
        tensor.mul_(0.5)
"""
WAIT = "self.side.wait_stream(torch.cuda.current_stream())"


def findings(first: str, second: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(REDUCER.format(first=first, second=second))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


def line_of(first: str, text: str, nth: int = 0) -> int:
    lines = textwrap.dedent(REDUCER.format(first=first, second=WAIT)).splitlines()
    return [number for number, line in enumerate(lines, 1) if text in line][nth]


CALLEE = 21  # `tensor.mul_(0.5)`, with one line for each caller's `first` and `second`


def test_every_caller_waits_before_its_block_then_the_callee_reads_in_order() -> None:
    assert findings(WAIT, WAIT) == []


@pytest.mark.parametrize(
    ("first", "second", "callers"), [(WAIT, "pass", [17]), ("pass", WAIT, [11]), ("pass", "pass", [11, 17])]
)
def test_a_caller_that_does_not_wait_leaves_the_race_in_the_callee(first: str, second: str, callers: list[int]) -> None:
    """The caller's call is flagged (the callee's summary reads its argument on the side
    stream) and the callee's read too: its entry is not ordered on every call."""
    assert findings(first, second) == [("CSL101", line) for line in [*callers, CALLEE]]


def test_a_wait_on_one_path_only_does_not_order_the_call() -> None:
    first = f"if self.overlap:\n            {WAIT}"
    assert findings(first, WAIT) == [
        ("CSL101", line_of(first, "self.scale(grad)")),
        ("CSL101", line_of(first, "tensor.mul_")),
    ]


def test_a_wait_for_another_stream_does_not_order_the_callers() -> None:
    """The default stream is not the caller's: it may have made a side stream current."""
    other = "self.side.wait_stream(torch.cuda.default_stream())"
    assert findings(other, WAIT) == [("CSL101", 11), ("CSL101", CALLEE)]


SHARED = """
import torch

SIDE = torch.cuda.Stream()

def scale(tensor: torch.Tensor):
    tensor.mul_(0.5)

def reduce(grad: torch.Tensor):
    {wait}
    with torch.cuda.stream(SIDE):
        scale(grad)
    torch.cuda.current_stream().wait_stream(SIDE)
"""


@pytest.mark.parametrize(
    ("wait", "flagged"), [("SIDE.wait_stream(torch.cuda.current_stream())", []), ("pass", [7, 12])]
)
def test_a_module_function_entered_on_a_global_stream_learns_its_callers_wait(wait: str, flagged: list[int]) -> None:
    source = textwrap.dedent(SHARED.format(wait=wait))
    assert sorted(f.line for f in lint_source(source, "m.py")) == flagged


BUCKET = """
import torch

class Reducer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def reduce(self, n: int):
        {given}
        with torch.cuda.stream(self.side):
            self.average(bucket)
        torch.cuda.current_stream().wait_stream(self.side)

    def average(self, flat: torch.Tensor):
        flat.div_(2)
"""


@pytest.mark.parametrize(
    ("given", "flagged"),
    [
        ("bucket = self.buffer.narrow(0, 0, n)", False),  # the caller holds no write of it either
        ("bucket = torch.ones(n, device='cuda')", True),  # written here on the current stream
    ],
)
def test_a_parameter_every_caller_gives_an_unknown_value_is_as_ready_as_that_value(given: str, flagged: bool) -> None:
    """ZeRO-3 reduces `bucket.buffer.narrow(...)`, filled on the reduction stream by another
    method: what the caller cannot say of the bucket, the callee does not assume."""
    source = textwrap.dedent(BUCKET.format(given=given))
    lines = [f.line for f in lint_source(source, "m.py")]
    assert (15 in lines) == flagged  # `flat.div_(2)`


CONTEXT = """
import contextlib
import torch

def scaled(x, ctx):
    y = x * 2
    with ctx:
        z = y + 1
    return z

def run(x, side):
    return scaled(x, {context})
"""


@pytest.mark.parametrize(
    ("context", "found"),
    [
        ("torch.cuda.stream(side)", True),  # the block runs on the caller's side stream
        ("torch.cuda.stream(torch.cuda.Stream())", True),
        ("contextlib.nullcontext()", False),
        ("torch.cuda.stream(torch.cuda.current_stream())", False),  # the stream current at the call
    ],
)
def test_a_stream_context_a_call_gives_is_entered_by_with(context: str, found: bool) -> None:
    codes = {f.code for f in lint_source(textwrap.dedent(CONTEXT.format(context=context)), "m.py")}
    assert ("CSL101" in codes) is found


MADE_IN_BLOCK = """
import torch

class Reducer:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def reduce(self, grads: list[torch.Tensor]):
        for grad in grads:
            {made}
            with torch.cuda.stream(self.side):
                {inside}
                self.average(out)
        torch.cuda.current_stream().wait_stream(self.side)

    def average(self, flat: torch.Tensor):
        flat.div_(2)
"""


@pytest.mark.parametrize(
    ("made", "inside", "flagged"),
    [
        ("pass", "out = grad.sum(0)", False),  # made on the side stream the callee runs on
        ("out = grad * 2", "pass", True),  # made on the current stream before the block, no wait
    ],
)
def test_a_parameter_every_caller_makes_in_the_block_is_written_on_the_callees_entry_stream(
    made: str, inside: str, flagged: bool
) -> None:
    """ColossalAI's low-level ZeRO reduces into `received_grad` inside its comm-stream block and
    hands it to a method: that method's reads are on the stream that wrote it. The call is in a
    loop, visited until its state settles: it stays one call."""
    source = textwrap.dedent(MADE_IN_BLOCK.format(made=made, inside=inside))
    lines = [f.line for f in lint_source(source, "m.py")]
    assert (17 in lines) == flagged  # `flat.div_(2)`


LOOPED_WAIT = """
import torch

SIDE = torch.cuda.Stream()

def scale(tensor: torch.Tensor):
    tensor.mul_(0.5)

def reduce(grad: torch.Tensor, steps: int):
    for _ in range(steps):
        {wait}
        with torch.cuda.stream(SIDE):
            scale(grad)
    torch.cuda.current_stream().wait_stream(SIDE)
"""


@pytest.mark.parametrize(
    ("wait", "flagged"), [("SIDE.wait_stream(torch.cuda.current_stream())", []), ("pass", [7, 13])]
)
def test_a_call_in_a_loop_is_one_call_however_often_the_loop_is_visited(wait: str, flagged: list[int]) -> None:
    """What every call of `scale` ordered before it is known although the loop's body is
    interpreted more than once."""
    source = textwrap.dedent(LOOPED_WAIT.format(wait=wait))
    assert sorted(f.line for f in lint_source(source, "m.py")) == flagged
