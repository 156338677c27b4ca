"""A loop that waits on every item of a collection of streams (or events) orders the waiter
after each item the analysis names, `streams[0]` or `streams[i % n]`, whether or not the loop
ran: over an empty collection there is no item any work ran on."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.ordering import HazardKind
from csan_lint.lint.streamflow import analyse

JOINED_BY_A_LOOP = """
import torch

class Reducer:
    def __init__(self, n):
        self.streams = [torch.cuda.Stream() for _ in range(n)]
        self.events = [torch.cuda.Event() for _ in range(n)]
        self.other = torch.cuda.Stream()

    def reduce(self, x, i):
        with torch.cuda.stream({producer}):
            self.total = x.sum()
            self.events[0].record()

    def result(self):
        for {target} in {iterable}:
            {wait}
        return self.total
"""


def _unordered_lines(**fields: str) -> set[int]:
    source = textwrap.dedent(JOINED_BY_A_LOOP.format(**fields))
    flow = analyse(cst.parse_module(source), "m.py")
    return {flow.line(h.access.node) for h in flow.hazards if h.kind is HazardKind.READ_AFTER_WRITE}


WAIT_STREAM = "torch.cuda.current_stream().wait_stream(s)"


@pytest.mark.parametrize(
    ("producer", "target", "iterable", "wait"),
    [
        ("self.streams[0]", "s", "self.streams", WAIT_STREAM),
        ("self.streams[i % len(self.streams)]", "s", "self.streams", WAIT_STREAM),
        ("self.streams[0]", "i, s", "enumerate(self.streams)", WAIT_STREAM),
        ("self.streams[0]", "e", "self.events", "torch.cuda.current_stream().wait_event(e)"),
    ],
)
def test_waiting_on_every_item_joins_the_item_that_produced(
    producer: str, target: str, iterable: str, wait: str
) -> None:
    assert _unordered_lines(producer=producer, target=target, iterable=iterable, wait=wait) == set()


@pytest.mark.parametrize(
    ("producer", "iterable", "wait"),
    [
        ("self.other", "self.streams", WAIT_STREAM),  # not an item of what the loop waits on
        ("self.streams[0]", "self.events", WAIT_STREAM),  # the items of another collection
        ("self.streams[0]", "self.streams", "torch.cuda.current_stream().wait_stream(s) if s else None"),
    ],
)
def test_a_loop_that_does_not_wait_on_the_producer_joins_nothing(producer: str, iterable: str, wait: str) -> None:
    assert _unordered_lines(producer=producer, target="s", iterable=iterable, wait=wait) == {18}


def test_work_launched_between_the_waits_is_not_joined() -> None:
    """A loop that launches on an item after waiting on another does more than wait: the waits
    of its earlier passes do not cover the later launches."""
    source = textwrap.dedent(
        """
        import torch

        def f(streams, x):
            with torch.cuda.stream(streams[0]):
                y = x * 2
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.stream(streams[0]):
                    y = x * 3
            return y + 1
        """
    )
    flow = analyse(cst.parse_module(source), "m.py")
    assert {flow.line(h.access.node) for h in flow.hazards if h.kind is HazardKind.READ_AFTER_WRITE} == {11}


@pytest.mark.parametrize(("listed", "unordered"), [("[a, b]", set()), ("[b]", {11})])
def test_a_loop_over_a_list_of_named_streams_joins_each_of_them(listed: str, unordered: set[int]) -> None:
    source = textwrap.dedent(
        f"""
        import torch

        def f(x):
            a, b = torch.cuda.Stream(), torch.cuda.Stream()
            streams = {listed}
            with torch.cuda.stream(a):
                y = x * 2
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
            z = y + 1
        """
    )
    flow = analyse(cst.parse_module(source), "m.py")
    assert {flow.line(h.access.node) for h in flow.hazards if h.kind is HazardKind.READ_AFTER_WRITE} == unordered


FORKED_BY_A_LOOP = """
import torch

class Optimizer:
    def __init__(self, n):
        self.streams = [torch.cuda.Stream() for _ in range(n)]
        self.ready = torch.cuda.Event()

    def step(self, grads):
        flat = torch.cat(grads)
        self.ready.record()
        for s in {iterable}:
            {wait}
        outs = []
        for i, g in enumerate(grads):
            with torch.cuda.stream(self.streams[{key}]):
                outs.append(flat * 2)
        for s in self.streams:
            torch.cuda.current_stream().wait_stream(s)
        return outs
"""


def _forked_findings(**fields: str) -> list[tuple[str, int]]:
    from csan_lint.lint.engine import lint_source

    source = textwrap.dedent(FORKED_BY_A_LOOP.format(**fields))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


@pytest.mark.parametrize("key", ["i % len(self.streams)", "0", "i"])
@pytest.mark.parametrize(
    ("iterable", "wait"),
    [
        ("self.streams", "s.wait_stream(torch.cuda.current_stream())"),
        ("self.streams", "s.wait_event(self.ready)"),
        ("self.streams", "self.ready.wait(s)"),
    ],
)
def test_each_item_waiting_in_a_loop_orders_every_item_whichever_key_picks_it(
    key: str, iterable: str, wait: str
) -> None:
    assert _forked_findings(key=key, iterable=iterable, wait=wait) == []


@pytest.mark.parametrize(
    ("iterable", "wait"),
    [
        ("self.streams[1:]", "s.wait_stream(torch.cuda.current_stream())"),  # not every item
        ("self.streams", "s.synchronize()"),  # no wait on the producer
        ("self.streams", "torch.cuda.current_stream().wait_stream(s)"),  # the other direction
    ],
)
def test_a_loop_in_which_not_every_item_waits_on_the_producer_orders_nothing(iterable: str, wait: str) -> None:
    assert _forked_findings(key="i % len(self.streams)", iterable=iterable, wait=wait) == [("CSL101", 17)]


FORKED_THROUGH_A_NAME = """
import torch

class Optimizer:
    def __init__(self, n):
        self.streams{annotation} = [torch.cuda.Stream() for _ in range(n)]

    def step(self, grad, i):
        flat = grad * 2
        {fork}
        stream = self.streams[{key}]
        with torch.cuda.stream(stream):
            out = flat + 1
        torch.cuda.current_stream().wait_stream(stream)
        return out
"""


@pytest.mark.parametrize("annotation", ["", ": list[torch.cuda.Stream]"])
@pytest.mark.parametrize("key", ["i", "0", "i % len(self.streams)"])
@pytest.mark.parametrize(
    ("fork", "found"),
    [
        ("for s in self.streams:\n            s.wait_stream(torch.cuda.current_stream())", []),
        ("pass", [("CSL101", 13)]),
    ],
)
def test_an_item_bound_to_a_name_is_that_item_of_the_collection(
    annotation: str, key: str, fork: str, found: list[tuple[str, int]]
) -> None:
    """`stream = self.streams[i]` names an item of the collection the loop forked, not a stream
    of its own that nothing ordered."""
    from csan_lint.lint.engine import lint_source

    source = textwrap.dedent(FORKED_THROUGH_A_NAME).format(fork=fork, key=key, annotation=annotation)
    assert sorted((f.code, f.line) for f in lint_source(source, "m.py")) == found
