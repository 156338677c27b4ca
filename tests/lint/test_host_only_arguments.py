"""Arguments that no kernel reads: bound into `functools.partial` (kept for a later call), or
passed to a helper of the module that only sets a Python attribute on them (`t.state.done =
True`). Naming a tensor there inside a side-stream block is no read on that stream."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

HOOK = """
import functools
import torch

class Reducer:
    def hook(self, param: torch.Tensor):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            {call}

    def _mark_done(self, param):
        param.state.done = True

    def _scale(self, param):
        param.state.scaled = param * 2
"""


def _findings(call: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(HOOK.format(call=call))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


@pytest.mark.parametrize(
    "call",
    [
        "self.callback = functools.partial(self._scale, param)",
        "self._mark_done(param)",
    ],
)
def test_a_tensor_no_kernel_reads_on_the_side_stream_is_not_flagged(call: str) -> None:
    assert _findings(call) == []


def test_a_helper_that_computes_on_the_tensor_reads_it_on_the_side_stream() -> None:
    """Read on the side stream, and the caller's next write to it comes with no join."""
    assert _findings("self._scale(param)") == [("CSL103", 9)]
