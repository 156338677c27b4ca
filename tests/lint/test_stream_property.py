"""A property that returns `current_stream()` is read anew at each use: the stream current where
it is read (an offload engine's `self.compute_stream`, DeepSpeed-style, in our own words)."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source

ENGINE = """
import torch

class Engine:
    def __init__(self):
        self.side = torch.cuda.Stream()

    @property
    def compute_stream(self):
        # resolved per use
        return torch.cuda.current_stream()

    def offload(self, x):
        y = x * 2
        {body}
"""


def findings(body: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(ENGINE.format(body=textwrap.indent(textwrap.dedent(body), " " * 8).strip()))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


def test_waits_on_the_property_order_the_current_stream() -> None:
    body = """
    self.side.wait_stream(self.compute_stream)
    with torch.cuda.stream(self.side):
        y.add_(1)
    self.compute_stream.wait_stream(self.side)
    return y * 3
    """
    assert findings(body) == []


def test_without_the_waits_both_races_are_found() -> None:
    body = """
    with torch.cuda.stream(self.side):
        y.add_(1)
    return y * 3
    """
    assert {"CSL101", "CSL102"} <= {code for code, _ in findings(body)}


def test_read_inside_a_block_it_is_the_blocks_stream() -> None:
    """Inside `with stream(s):` the property is `s`: waiting on it there is a wait on itself."""
    body = """
    with torch.cuda.stream(self.side):
        self.side.wait_stream(self.compute_stream)
        y.add_(1)
    self.compute_stream.wait_stream(self.side)
    return y * 3
    """
    assert findings(body) == [("CSL101", 16), ("CSL101", 17)]  # the wait orders nothing: the add races


def test_a_bound_copy_of_the_property_is_the_stream_current_where_it_was_read() -> None:
    body = """
    compute = self.compute_stream
    self.side.wait_stream(compute)
    with torch.cuda.stream(self.side):
        y.add_(1)
    compute.wait_stream(self.side)
    return y * 3
    """
    assert findings(body) == []


GETTERS = """
import torch


def get_comp_stream():
    \"\"\"The stream for computation.\"\"\"
    return torch.cuda.current_stream()


class Engine:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def compute_stream(self):
        return torch.cuda.current_stream()

    def offload(self, x):
        y = x * 2
        self.side.wait_stream({waited})
        with torch.cuda.stream(self.side):
            y.add_(1)
        {joiner}.wait_stream(self.side)
        return y * 3
"""


def getter_findings(waited: str, joiner: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(GETTERS.format(waited=waited, joiner=joiner))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


def test_a_function_that_returns_the_current_stream_is_it_where_it_is_called() -> None:
    """Megatron's `get_comp_stream()`, an engine's `self.compute_stream()`: each call returns the
    stream current there, so waits on it order the caller's stream."""
    assert getter_findings("self.compute_stream()", "get_comp_stream()") == []
    assert getter_findings("get_comp_stream()", "self.compute_stream()") == []


def test_a_function_that_takes_an_argument_is_no_getter() -> None:
    """`get_comp_stream(device=None)` may return any stream: a join on it is a join on a stream
    of its own, as on a new one, and the read after it races."""
    source = textwrap.dedent(GETTERS.format(waited="self.compute_stream()", joiner="get_comp_stream()")).replace(
        "def get_comp_stream():", "def get_comp_stream(device=None):"
    )
    assert ("CSL102", 23) in sorted((f.code, f.line) for f in lint_source(source, "m.py"))
    assert ("CSL102", 23) in getter_findings("self.compute_stream()", "torch.cuda.Stream()")
