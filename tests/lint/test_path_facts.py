"""Path facts: an ordering made under a test of a name holds for a later branch whose test
implies it (apex's `spatial_method` branches, the `use_streams` guards of activation
offloaders, in our own words), and only there."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.pathfacts import Fact, facts_of


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


METHODS = """
import torch

def forward(x, method, side):
    y = x * 2
    if method != 2:
        side.wait_stream(torch.cuda.current_stream())
    {between}
    if method == 1:
        with torch.cuda.stream(side):
            y.add_(1)
    elif {second}:
        with torch.cuda.stream(side):
            y.mul_(2)
    if method != 2:
        torch.cuda.current_stream().wait_stream(side)
    return y.sum()
"""


@pytest.mark.parametrize("second", ["method == 3", "method in (3, 4)", "method is None"])
def test_uses_under_tests_that_imply_the_waits_test_are_ordered(second: str) -> None:
    assert findings(METHODS.format(between="", second=second)) == []


@pytest.mark.parametrize("second", ["method == 2", "method in (2, 3)", "method != 1", "x.numel() > 3"])
def test_a_use_where_the_wait_may_not_have_been_made_is_flagged(second: str) -> None:
    assert ("CSL101", 14) in findings(METHODS.format(between="", second=second))


@pytest.mark.parametrize("between", ["method = 4", "method = x.numel()", "for method in range(3): pass"])
def test_rebinding_the_tested_name_forgets_what_was_known(between: str) -> None:
    assert ("CSL101", 11) in findings(METHODS.format(between=between, second="method == 3"))


def test_a_use_made_under_a_test_is_joined_by_a_wait_under_a_test_it_implies() -> None:
    """The join waits only when `method != 2`; the side-stream uses happen only then."""
    source = METHODS.format(between="", second="method == 3").replace(
        "if method != 2:\n        torch.cuda.current_stream()", "if method == 2:\n        torch.cuda.current_stream()"
    )
    assert ("CSL102", 17) in findings(source)


OFFLOADER = """
import torch

class Offloader:
    def __init__(self, use_streams):
        self.use_streams = use_streams
        self.s0 = torch.cuda.current_stream()
        self.s1 = torch.cuda.Stream()

    def pack(self, activation: torch.Tensor):
        if {guard}:
            self.s1.wait_stream(self.s0)
        stream = {choice}
        with torch.cuda.stream(stream):
            self.kept = activation.to("cpu", non_blocking=True)
        self.s0.wait_stream(self.s1)
"""


@pytest.mark.parametrize(
    ("guard", "choice"),
    [
        ("self.use_streams", "self.s1 if self.use_streams else self.s0"),
        ("not self.use_streams", "self.s0 if self.use_streams else self.s1"),
        ("self.use_streams", "self.s1 if self.use_streams and self.s1 is not None else self.s0"),
    ],
)
def test_a_stream_chosen_by_the_guard_of_its_wait_is_ordered(guard: str, choice: str) -> None:
    assert findings(OFFLOADER.format(guard=guard, choice=choice)) == []


@pytest.mark.parametrize(
    ("guard", "choice"),
    [
        ("self.use_streams", "self.s1 if not self.use_streams else self.s0"),
        ("self.use_streams", "self.s1 if self.pinned else self.s0"),
        ("self.use_streams", "self.s1 if self.use_streams or self.pinned else self.s0"),
    ],
)
def test_a_stream_chosen_by_another_test_is_flagged(guard: str, choice: str) -> None:
    assert findings(OFFLOADER.format(guard=guard, choice=choice)) == [("CSL101", 15)]


def test_an_ordering_held_on_a_condition_survives_a_join_whose_other_path_implies_it() -> None:
    """A test of `and` implies the wait's condition on its True path only; its False path says
    nothing: after their join, the wait still holds wherever `method != 2`."""
    between = "if method != 2 and method != 3:\n        pass"
    assert findings(METHODS.format(between=between, second="method == 3")) == []


def test_a_long_chain_of_and_is_read_without_recursion() -> None:
    """Generated code writes chains longer than the interpreter's recursion limit."""
    test = cst.parse_expression(" and ".join(f"m != {i}" for i in range(3000)))
    assert facts_of(test, True) == {Fact("m", "not in", frozenset({i})) for i in range(3000)}
    assert facts_of(test, False) == frozenset()  # one of them failed: which is not known


PREFETCHER = """
import torch

class Prefetcher:
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.load()

    def load(self):
        try:
            self.batch = next(self.loader)
        except StopIteration:
            self.batch = None
            return
        with torch.cuda.stream(self.stream):
            self.batch = self.batch.cuda(non_blocking=True)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.batch
        if {guard}:
            batch.record_stream(torch.cuda.current_stream())
        self.load()
        return batch
"""


@pytest.mark.parametrize("guard", ["batch is not None", "not (batch is None)", "batch != None"])
def test_a_record_stream_skipped_only_where_the_name_is_none_protects_every_tensor(guard: str) -> None:
    """The path that skips the record holds None, not a tensor the caller could release."""
    assert findings(PREFETCHER.format(guard=guard)) == []


@pytest.mark.parametrize("guard", ["batch.numel() > 0", "self.recording", "batch is None"])
def test_a_record_stream_skipped_where_a_tensor_may_be_held_is_flagged(guard: str) -> None:
    assert findings(PREFETCHER.format(guard=guard)) == [("CSL201", 25)]


TO_HOST = """
import torch

class Dispatcher:
    def __init__(self):
        self.dtoh_stream = torch.cuda.Stream()
        self.other_stream = torch.cuda.Stream()

    def to_host(self, counts: torch.Tensor):
        {bind}
        if {guard}:
            self.dtoh_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.dtoh_stream):
            counts = counts.to("cpu", non_blocking=True)
        self.event = self.dtoh_stream.record_event()
        return counts
"""


@pytest.mark.parametrize(
    ("bind", "guard"),
    [
        ("on_side = torch.cuda.current_stream() != self.dtoh_stream", "on_side"),
        ("on_side = self.dtoh_stream is not torch.cuda.current_stream()", "on_side or counts.numel()"),
        ("pass", "counts.numel() or torch.cuda.current_stream() != self.dtoh_stream"),
        ("same = torch.cuda.current_stream() == self.dtoh_stream", "not same"),
        ("pass", "torch.cuda.current_stream() != self.dtoh_stream"),
        ("current = torch.cuda.current_stream()", "not (current == self.dtoh_stream)"),
    ],
)
def test_a_wait_skipped_only_where_the_current_stream_is_the_waiting_one_orders_it(bind: str, guard: str) -> None:
    """Where the test says the two streams are one, the block runs in order with the caller's work."""
    assert findings(TO_HOST.format(bind=bind, guard=guard)) == []


@pytest.mark.parametrize(
    ("bind", "guard"),
    [
        ("same = torch.cuda.current_stream() == self.dtoh_stream", "same"),
        ("pass", "torch.cuda.current_stream() != self.other_stream"),
        ("on_side = torch.cuda.current_stream() != self.dtoh_stream\n        on_side = counts.numel()", "on_side"),
        ("on_side = self.dtoh_stream is not torch.cuda.current_stream()", "on_side and counts.numel()"),
    ],
)
def test_a_wait_skipped_where_the_streams_may_differ_is_flagged(bind: str, guard: str) -> None:
    source = TO_HOST.format(bind=bind, guard=guard)
    line = textwrap.dedent(source).splitlines().index('            counts = counts.to("cpu", non_blocking=True)') + 1
    assert ("CSL101", line) in findings(source)


def test_a_stream_parameter_tested_against_the_current_stream_is_it_where_they_are_equal() -> None:
    source = """
    import torch

    def to_host(counts: torch.Tensor, side, other):
        if {guard}:
            side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            counts = counts.to("cpu", non_blocking=True)
        return counts
    """
    assert findings(source.format(guard="side is not torch.cuda.current_stream()")) == []
    assert findings(source.format(guard="side is not other")) == [("CSL101", 8)]
