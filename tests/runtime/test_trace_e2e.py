"""A real sanitized run (emulated device) recorded as a trace replays to the same reports."""

from __future__ import annotations

import io

import pytest

from csan_lint.runtime.report import to_json
from csan_lint.runtime.trace import replay
from csan_lint.runtime.tracker import Tracker

torch = pytest.importorskip("torch")


def test_sanitized_run_replays_to_the_same_reports(tmp_path):
    from csan_lint.runtime import sanitize

    trace = io.StringIO()
    with sanitize(device="emulated", trace_out=trace) as sanitizer:
        x = torch.ones(64, device="cuda")
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            y = x * 2  # reads x with no wait: read-after-write
        x[32:].add_(1)  # a view at an offset, written while side may still read: write-after-read
        pinned = torch.empty(64, pin_memory=True)
        pinned.copy_(y, non_blocking=True)
        pinned.sum()  # the host reads before the copy is done: host-read-pending
    live = sanitizer.errors
    assert {e.kind for e in live} == {"read-after-write", "write-after-read", "host-read-pending"}

    path = tmp_path / "run.jsonl"
    path.write_text(trace.getvalue())
    replayed = Tracker()
    replay(path, replayed)
    assert [to_json(e) for e in replayed.errors] == [to_json(e) for e in live]
    innermost = to_json(live[0])["current"]["stack"][-1]
    assert innermost["file"] == __file__ and innermost["function"] == "test_sanitized_run_replays_to_the_same_reports"
