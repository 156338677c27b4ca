"""A side stream that waits on the current stream inside its own block waits on itself: the
wait orders nothing (CSL101 at the wait), and its fix is the wait before the block."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


OFFLOAD = """
import torch

class Offloader:
    def start(self, grads):
        {before}
        with torch.cuda.stream(self.copy_stream):
            {inside}
            for g in grads:
                self.host[g].copy_(g, non_blocking=True)
"""


def test_a_wait_on_the_current_stream_inside_the_block_is_flagged_at_the_wait() -> None:
    source = OFFLOAD.format(before="pass", inside="self.copy_stream.wait_stream(torch.cuda.current_stream())")
    found = lint_source(textwrap.dedent(source), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL101", 8)]
    assert "waits on the current stream, which inside its block is itself" in found[0].message
    assert "self.copy_stream.wait_stream(torch.cuda.current_stream())" in (found[0].fix or "")


def test_the_same_wait_before_the_block_orders_the_copy_stream() -> None:
    source = OFFLOAD.format(before="self.copy_stream.wait_stream(torch.cuda.current_stream())", inside="pass")
    assert findings(source) == []


def test_an_event_recorded_inline_on_the_current_stream_inside_the_block_is_a_self_wait() -> None:
    inside = "self.copy_stream.wait_event(torch.cuda.current_stream().record_event())"
    assert findings(OFFLOAD.format(before="pass", inside=inside)) == [("CSL101", 8)]


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        # on the path where the side stream is chosen, the wait is on itself
        ("self.copy_stream if self.overlap else torch.cuda.current_stream()", [("CSL101", 7)]),
        # whichever item it is, inside its block it is the current stream
        ("self.streams[i % 2]", [("CSL101", 7)]),
    ],
)
def test_a_stream_chosen_at_run_time_is_judged_per_choice(chosen: str, expected: list[tuple[str, int]]) -> None:
    source = f"""
    import torch

    def reduce(self, bucket, i):
        stream = {chosen}
        with torch.cuda.stream(stream):
            stream.wait_stream(torch.cuda.current_stream())
    """
    assert findings(source) == expected


def test_a_stream_unknown_after_a_join_is_not_judged() -> None:
    source = """
    import torch

    def reduce(self, bucket):
        if self.overlap:
            stream = self.reduce_stream
        else:
            stream = self.copy_stream
        with torch.cuda.stream(stream):
            stream.wait_stream(torch.cuda.current_stream())
    """
    assert findings(source) == []
