"""A tensor returned or yielded is used, then dropped, by the caller on its own stream: memory
from another stream's pool needs `record_stream` for the caller's stream (CSL201), unless that
stream waited for the caller's stream before allocating it."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


GENERATOR = """
import torch

def batches(loader):
    stream = torch.cuda.Stream()
    for cpu in loader:
        with torch.cuda.stream(stream):
            ready = cpu.to("cuda", non_blocking=True)
            ready = ready.float().sub_(0.5)
        torch.cuda.current_stream().wait_stream(stream)
        out = ready
        {before}
        yield out
"""


def test_a_batch_made_on_a_side_stream_and_yielded_is_flagged_at_the_yield() -> None:
    found = lint_source(textwrap.dedent(GENERATOR.format(before="pass")), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL201", 13)]
    assert "released by the caller" in found[0].message
    assert "'out' was allocated on side stream 'stream'" in found[0].message


@pytest.mark.parametrize(
    "before",
    [
        "out.record_stream(torch.cuda.current_stream())",
        "self_cache.append(out)",  # kept alive elsewhere: whoever drops it decides
    ],
)
def test_a_recorded_or_kept_batch_is_not_flagged(before: str) -> None:
    source = GENERATOR.replace("def batches(loader):", "def batches(loader, self_cache):")
    assert findings(source.format(before=before)) == []


def test_a_side_stream_that_waits_for_the_callers_stream_before_allocating_is_not_flagged() -> None:
    source = GENERATOR.replace(
        "        with torch.cuda.stream(stream):",
        "        stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(stream):",
    )
    assert findings(source.format(before="pass")) == []


PREFETCHER = """
import torch

class Loader:
    def __init__(self, batches):
        self.batches = iter(batches)
        self.copy = torch.cuda.Stream()
        self._fill()

    def _fill(self):
        with torch.cuda.stream(self.copy):
            self.pending = next(self.batches).cuda(non_blocking=True).half()

    def take(self):
        torch.cuda.current_stream().wait_stream(self.copy)
        ready = self.pending
        {record}
        self._fill()
        return ready
"""


def test_a_tensor_stored_on_self_by_another_method_and_returned_is_flagged() -> None:
    assert findings(PREFETCHER.format(record="pass")) == [("CSL201", 19)]


def test_recording_the_returned_tensor_on_the_callers_stream_fixes_it() -> None:
    assert findings(PREFETCHER.format(record="ready.record_stream(torch.cuda.current_stream())")) == []


def test_a_tensor_made_on_the_callers_stream_is_not_flagged() -> None:
    source = """
    import torch

    def f(x, s):
        y = x.float()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            z = y.sum()
        torch.cuda.current_stream().wait_stream(s)
        y.record_stream(s)
        return y, z.item()
    """
    assert findings(source) == []


def test_only_tensors_certainly_made_here_have_a_pool() -> None:
    """A method of a value that only may be a tensor (`transformer.transform(...)`), a copy to
    the host, or an attribute still held by the object: not handed over from a pool."""
    source = """
    import torch

    class Cache:
        def load(self, transformer, ids):
            with torch.cuda.stream(self.s):
                found = transformer.transform(ids)
                host = ids.to("cpu", non_blocking=True)
                self.kept = ids.float()
            torch.cuda.current_stream().wait_stream(self.s)
            return found, host, self.kept
    """
    assert findings(source) == []


def test_recording_a_view_attribute_records_the_tensor() -> None:
    source = GENERATOR.format(before="out.data.record_stream(torch.cuda.current_stream())")
    assert findings(source) == []
