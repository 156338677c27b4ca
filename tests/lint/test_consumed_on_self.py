"""A tensor one method allocates on a side stream of `self` and keeps in an attribute, which
another method uses on the current stream (after waiting for it) and then drops (`self.x = ...`,
`del self.x`): the side stream's allocator may reuse the block under the current stream's
kernels (CSL201), unless that method records the current stream or the side stream waits for
the current one before it allocates."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

PREFETCHER = """
import torch

class Prefetcher:
    def load(self, x):
{before_load}
        with torch.cuda.stream(self.copy):
            self.buf = x.to("cuda", non_blocking=True)

    def step(self):
        torch.cuda.current_stream().wait_stream(self.copy)
        y = self.buf * 2
{before_drop}
        {drop}
        return y
"""


def findings(before_load: str = "", before_drop: str = "", drop: str = "self.buf = None") -> list[tuple[str, int]]:
    source = PREFETCHER.format(before_load=before_load, before_drop=before_drop, drop=drop)
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py") if f.code == "CSL201")


@pytest.mark.parametrize("drop", ["self.buf = None", "del self.buf", "self.buf = torch.empty(0)"])
def test_a_side_stream_tensor_used_and_dropped_by_another_method_is_flagged(drop: str) -> None:
    assert findings(drop=drop) == [("CSL201", 12)]


@pytest.mark.parametrize(
    ("before_load", "before_drop", "drop"),
    [
        ("", "        self.buf.record_stream(torch.cuda.current_stream())", "self.buf = None"),
        ("        self.copy.wait_stream(torch.cuda.current_stream())", "", "self.buf = None"),
        ("", "", "pass  # kept: a later method drops it"),
    ],
)
def test_a_recorded_waited_or_kept_tensor_is_not_flagged(before_load: str, before_drop: str, drop: str) -> None:
    assert findings(before_load, before_drop, drop) == []
