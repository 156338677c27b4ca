"""A helper with no stream block of its own runs on the stream its callers' callers entered:
every call of it is made from functions themselves entered on that stream, or inside a block
on a local the callers bound to streams the helper can name alike."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


COPY_BACK = """
    def copy_back(self, bucket):
        flat = torch.cat(bucket)
        for buf, synced in zip(bucket, flat.split(4)):
            buf.copy_(synced)
        {after}
"""
"""Writes the caller's bucket items on the stream it runs on: on a side stream, the caller may
drop them at once when it returns (CSL201 at `buf.copy_`), unless they are recorded there."""


def reducer(body: str, helpers: str = "", after: str = "pass") -> str:
    return (
        "import torch\n\nclass Reducer:\n    def reduce(self, grads):\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + textwrap.dedent(helpers).replace("\n", "\n    ")
        + COPY_BACK.format(after=after)
    )


def line_of(source: str, text: str) -> int:
    return next(number for number, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line)


TWO_LEVELS = (
    """
with torch.cuda.stream(self.side):
    self.scatter(grads)
""",
    """
def scatter(self, bucket):
    self.copy_back(bucket)
""",
)

THREE_LEVELS = (
    """
with torch.cuda.stream(self.side):
    self.split(grads)
""",
    """
def split(self, grads):
    for bucket in (grads[:2], grads[2:]):
        self.scatter(bucket)

def scatter(self, bucket):
    self.copy_back(bucket)
""",
)


@pytest.mark.parametrize("chain", [TWO_LEVELS, THREE_LEVELS], ids=["two levels", "three levels"])
def test_a_helper_called_only_from_functions_entered_on_a_side_stream_runs_there(chain: tuple[str, str]) -> None:
    source = reducer(*chain)
    assert findings(source) == [("CSL201", line_of(source, "buf.copy_(synced)"))]


@pytest.mark.parametrize("chain", [TWO_LEVELS, THREE_LEVELS], ids=["two levels", "three levels"])
def test_recording_the_items_on_that_stream_is_fine(chain: tuple[str, str]) -> None:
    assert findings(reducer(*chain, after="for buf in bucket: buf.record_stream(self.side)")) == []


def test_a_call_outside_any_block_keeps_the_helper_on_its_callers_stream() -> None:
    """`flush` calls the middle function on whatever stream its own caller runs on."""
    body, helpers = TWO_LEVELS
    source = reducer(body, helpers + "\ndef flush(self, grads):\n    self.scatter(grads)\n")
    assert findings(source) == []


def test_a_call_in_a_block_on_another_stream_is_not_the_same_entry() -> None:
    body = """
    with torch.cuda.stream(self.side):
        self.scatter(grads)
    with torch.cuda.stream(self.other):
        self.scatter(grads)
    """
    assert findings(reducer(body, TWO_LEVELS[1])) == []


CHOSEN = """
if self.overlap:
    stream = self.side
else:
    stream = {other}
with torch.cuda.stream(stream):
    self.scatter(grads)
"""


@pytest.mark.parametrize("other", ["torch.cuda.current_stream()", "self.side"])
def test_a_local_bound_to_streams_the_helper_names_alike_enters_it_on_that_choice(other: str) -> None:
    source = reducer(CHOSEN.format(other=other), TWO_LEVELS[1])
    found = lint_source(textwrap.dedent(source), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL201", line_of(source, "buf.copy_(synced)"))]
    assert "used on side stream 'self.side'" in found[0].message


@pytest.mark.parametrize(
    "other",
    [
        "torch.cuda.Stream()",  # made here: the helper cannot name it
        "streams[0]",  # one of a list, by a key
    ],
)
def test_a_local_bound_to_a_stream_the_helper_cannot_name_enters_nothing(other: str) -> None:
    assert findings(reducer(CHOSEN.format(other=other), TWO_LEVELS[1])) == []


def test_a_local_rebound_in_a_loop_enters_nothing() -> None:
    body = """
    for stream in (self.side, self.other):
        with torch.cuda.stream(stream):
            self.scatter(grads)
    """
    assert findings(reducer(body, TWO_LEVELS[1])) == []


def test_a_local_bound_only_to_the_current_stream_leaves_the_helper_on_it() -> None:
    body = """
    stream = torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        self.scatter(grads)
    """
    assert findings(reducer(body, TWO_LEVELS[1])) == []


SELF_RECURSIVE = """
def scatter(self, bucket):
    if len(bucket) > 4:
        self.scatter(bucket[4:])
    self.copy_back(bucket)
"""

MUTUALLY_RECURSIVE = """
def scatter(self, bucket):
    if bucket:
        self.gather(bucket[1:])
    self.copy_back(bucket)

def gather(self, bucket):
    self.scatter(bucket)
"""


@pytest.mark.parametrize("helpers", [SELF_RECURSIVE, MUTUALLY_RECURSIVE], ids=["itself", "each other"])
def test_recursion_reached_from_a_block_is_entered_on_its_stream(helpers: str) -> None:
    source = reducer(TWO_LEVELS[0], helpers)
    assert findings(source) == [("CSL201", line_of(source, "buf.copy_(synced)"))]


def test_recursion_no_block_reaches_enters_nothing() -> None:
    body = """
    self.scatter(grads)
    with torch.cuda.stream(self.side):
        pass
    """
    assert findings(reducer(body, MUTUALLY_RECURSIVE)) == []


def test_the_function_a_block_returns_to_continues_on_its_entry_stream() -> None:
    """Entered on the side stream, the helper's write of the caller's tensor is in order with the
    caller's next use there: nothing is pending at its return."""
    source = """
    import torch

    class Reducer:
        def reduce(self, flat: torch.Tensor):
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                self.average(flat)
                flat.mul_(2)
            torch.cuda.current_stream().wait_stream(self.side)

        def average(self, flat: torch.Tensor):
            flat.div_(4)
    """
    assert findings(source) == []


PASSED_ON = """
import torch

class Reducer:
    def reduce(self, grads):
        with torch.cuda.stream(self.side):
            self.average(grads)

    def average(self, grads):
        flat = torch.cat(grads)
        flat.div_(2)
        self.scale(flat)

    def scale(self, flat: torch.Tensor):
        flat.mul_(3)
"""


def test_a_tensor_an_entered_caller_made_on_the_side_stream_is_ready_there() -> None:
    """`scale`'s argument was written by `average` on the stream both run on, not before the block."""
    assert findings(PASSED_ON) == []
