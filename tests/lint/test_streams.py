"""Stream identity: one spelling is one stream, two known spellings are two, and a pair the
analysis cannot tell apart never makes a finding by itself."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.tokens import UNKNOWN, distinct
from csan_lint.lint.engine import lint_source


def codes(source: str) -> set[tuple[str, int]]:
    return {(finding.code, finding.line) for finding in lint_source(textwrap.dedent(source), "m.py")}


@pytest.mark.parametrize(
    ("a", "b", "known_distinct"),
    [
        ("s", "s", False),
        ("s", "t", True),
        ("<current>", "s", True),
        ("streams[0]", "streams[1]", True),
        ("streams[i % 2]", "streams[(i - 1) % 2]", False),
        ("streams[i]", "streams[0]", False),
        ("streams[i]", "others[i]", True),
        (UNKNOWN, "s", False),
        ("<current> or s", "<current>", True),  # on the path where `s` was chosen
        ("a or b", "a or b", False),
    ],
)
def test_which_spellings_are_known_to_be_different_streams(a: str, b: str, known_distinct: bool) -> None:
    assert distinct(a, b) is known_distinct
    assert distinct(b, a) is known_distinct


RING = """
import torch

def ring(xs, streams):
    for i, x in enumerate(xs):
        with torch.cuda.stream(streams[{first}]):
            y = torch.relu(x)
        with torch.cuda.stream(streams[{second}]):
            z = y + 1
    torch.cuda.synchronize()
"""


LISTED = """
import torch

def ring(q, kv, cp_stream, steps):
    out = torch.empty_like(q)
    {fork}
    streams = [torch.cuda.current_stream(), cp_stream]
    for i in range(steps):
        with torch.cuda.stream(streams[i % 2]):
            out.add_(q * kv)
    {join}
    return out.sum()
"""


@pytest.mark.parametrize(
    ("fork", "join", "found"),
    [
        (
            "cp_stream.wait_stream(torch.cuda.current_stream())",
            "torch.cuda.current_stream().wait_stream(cp_stream)",
            set(),
        ),
        ("pass", "torch.cuda.current_stream().wait_stream(streams[1])", {("CSL101", 10)}),
        ("cp_stream.wait_stream(torch.cuda.current_stream())", "pass", {("CSL102", 12)}),
    ],
)
def test_an_item_of_a_list_of_streams_is_one_of_them(fork: str, join: str, found: set[tuple[str, int]]) -> None:
    """`streams[i % 2]` of `[current_stream(), cp_stream]` runs on the current stream or on
    `cp_stream`: only the `cp_stream` path needs the fork and the join (TE's ring attention)."""
    assert codes(LISTED.format(fork=fork, join=join)) == found


def test_a_race_on_a_chosen_stream_names_the_choice_that_races() -> None:
    [message] = [f.message for f in lint_source(textwrap.dedent(LISTED.format(fork="pass", join="pass")), "m.py")
                 if f.code == "CSL101"]  # fmt: skip
    assert "side stream 'cp_stream'" in message


def test_two_items_picked_by_computed_keys_may_be_one_stream() -> None:
    assert codes(RING.format(first="i % 2", second="(i - 1) % 2")) == set()


def test_two_items_picked_by_different_literal_keys_are_two_streams() -> None:
    assert codes(RING.format(first="0", second="1")) == {("CSL102", 9), ("CSL201", 9)}


REPLAY = """
import torch

def run(model, batches, s):
    g = torch.cuda.CUDAGraph()
    static_in = torch.zeros(8, device="cuda")
    with torch.cuda.graph(g):
        static_out = model(static_in)
    for batch in batches:
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            static_in.copy_(batch)
        {between}
        g.replay()
    torch.cuda.current_stream().wait_stream(s)
"""


def test_replay_reads_the_static_inputs_on_the_current_stream() -> None:
    assert codes(REPLAY.format(between="pass")) == {("CSL102", 14)}
    assert codes(REPLAY.format(between="torch.cuda.current_stream().wait_stream(s)")) == set()


CAPTURED_IN_ANOTHER_METHOD = """
import torch

class Runner:
    def __init__(self, model):
        self.model = model
        self.graph = None
        self.stream = torch.cuda.Stream()
        self.inp = torch.zeros(8, device="cuda")

    def _capture(self):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            with torch.cuda.graph(self.graph):
                self.out = self.model({captured})

    def step(self, x):
        if self.graph is None:
            self._capture()
        self.inp.copy_(x)
        {wait}
        with torch.cuda.stream(self.stream):
            self.graph.replay()
        torch.cuda.current_stream().wait_stream(self.stream)
"""


@pytest.mark.parametrize(
    ("captured", "wait", "flagged"),
    [
        ("self.inp", "pass", True),  # the replay reads what the capture read, written just before
        ("self.inp", "self.stream.wait_stream(torch.cuda.current_stream())", False),
        ("torch.ones(8, device='cuda')", "pass", False),  # the capture reads none of the class's tensors
    ],
)
def test_a_replay_reads_the_tensors_another_method_captured(captured: str, wait: str, flagged: bool) -> None:
    """torchmd-net captures its graph in `_init_cuda_graph` and replays it on that stream in
    `calculate` right after writing the static input: the tensors of `self` a capture reads
    are the replay's inputs wherever the class replays it."""
    found = codes(CAPTURED_IN_ANOTHER_METHOD.format(captured=captured, wait=wait))
    assert (("CSL101", 23) in found) is flagged


CAPTURED_ON_A_SIDE_STREAM = """
import torch

def run(x, side):
    side.wait_stream(torch.cuda.current_stream())
    out = torch.empty(4, device="cuda")
    with torch.cuda.stream(side):
        out.copy_(x * 2)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out.copy_(x * 2)
        {after}
    graph.replay()
    torch.cuda.synchronize()
"""


@pytest.mark.parametrize(("after", "expected"), [("pass", set()), ("out.add_(1)", {("CSL102", 13)})])
def test_a_capture_runs_no_kernel_only_its_replays_meet_the_work_around_them(after: str, expected: set) -> None:
    """The capture syncs the device first and launches nothing: its side-stream write of `out`
    is no write for the replay on the current stream to race; an eager write after it is."""
    assert codes(CAPTURED_ON_A_SIDE_STREAM.format(after=after)) == expected


def test_a_wait_on_the_stream_already_current_orders_nothing() -> None:
    """Inside `with torch.cuda.stream(s):` the current stream *is* `s`: a self-wait, flagged at
    the wait, and the read it was meant to order is flagged too."""
    source = """
    import torch

    def f(x, s):
        y = x * 2
        with torch.cuda.stream(s):
            s.wait_stream(torch.cuda.current_stream())
            z = y + 1
        torch.cuda.current_stream().wait_stream(s)
        return z
    """
    assert codes(source) == {("CSL101", 7), ("CSL101", 8)}


def test_recording_a_tensor_on_its_allocating_stream_protects_nothing() -> None:
    source = """
    import torch

    def f(x, s):
        y = x * 2
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            z = y + 1
        y.record_stream(torch.cuda.current_stream())
        del y
        w = x + 1  # may get y's block: the current stream has not waited for s
        torch.cuda.current_stream().wait_stream(s)
        return z, w
    """
    assert codes(source) == {("CSL201", 8)}


WAIT_THEN_READ = """
import torch

class Reducer:
    def reduce(self, grad: torch.Tensor, side, producers, producer=None):
        {wait}
        with torch.cuda.stream(side):
            out = grad * 2
        torch.cuda.current_stream().wait_stream(side)
        return out
"""


@pytest.mark.parametrize(
    ("wait", "found"),
    [
        ("side.wait_stream(producer)", set()),  # a parameter: the caller may pass its own stream
        ("for stream in producers:\n            side.wait_stream(stream)", set()),  # each producer
        ("for s in producers or {torch.cuda.current_stream()}:\n            side.wait_stream(s)", set()),
        ("side.wait_stream(self.copy_stream)", {"CSL101"}),  # another stream of the object
        ("producer = torch.cuda.Stream()\n        side.wait_stream(producer)", {"CSL101"}),  # rebound
        ("for stream in producers:\n            side.wait_stream(stream)\n            log(stream)", {"CSL101"}),
    ],
)
def test_a_wait_on_a_stream_that_may_be_the_callers_orders_its_work(wait: str, found: set[str]) -> None:
    """`side.wait_stream(producer)` with `producer` passed in, or every stream of a collection
    waited in a loop: the caller's stream may be among them, and a finding must not rest on it
    not being so. (A loop that does more than wait may run zero times.)"""
    source = textwrap.dedent(WAIT_THEN_READ.format(wait=wait))
    read = source.splitlines().index("            out = grad * 2") + 1
    assert codes(source) == {(code, read) for code in found}
