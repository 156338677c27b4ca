"""CSL502: a side stream used during graph capture is not forked from / joined to the capture stream."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import host_fields
from csan_lint.runtime.kinds import UNJOINED_CAPTURE_FORK


class UnjoinedCaptureFork(Rule):
    """
    ## What it does
    Flags a `with torch.cuda.stream(side):` block inside a graph capture (the body of
    `with torch.cuda.graph(g):`, or between `g.capture_begin()` and `g.capture_end()`) when
    `side` was not forked from the capture stream after the capture began
    (`side.wait_stream(capture)`, or waiting on an event recorded on it), or is not joined back
    before the capture ends (`capture.wait_stream(side)`, or an event recorded on `side` that
    the capture stream waits on).

    ## Why is this bad?
    Capture follows dependencies. Work on a side stream that was not forked from the capture
    stream is not captured at all: it runs once, now, and replay skips it. A side stream forked
    but not joined leaves the capture unjoined, and CUDA fails `capture_end` with
    `cudaErrorStreamCaptureUnjoined`. A fork made before `capture_begin` does not count.

    ## Assumptions
    Orderings are read in program order on every path through the capture: a fork or a join
    made on one branch only does not count for the other, and one made by a called function
    counts when the analysis follows that function (same module, or another linted file).

    ## Known problems
    A capture begun in one function and ended in another is not followed. The capture stream
    inside `torch.cuda.graph(g)` is `torch.cuda.current_stream()` (or its `stream=` argument);
    the same stream reached through another name is taken for a side stream.
    """

    code = "CSL502"
    name = "unjoined-capture-fork"
    summary = "a side stream used during graph capture is not forked from / joined to the capture stream"
    message = "{stream} is used during CUDA graph capture but is {missing} {capture}"
    fix_title = (
        "fork and join inside the capture: `{stream_code}.wait_stream({capture_code})` before the block, "
        "`{capture_code}.wait_stream({stream_code})` after it"
    )
    confirmed_by = (UNJOINED_CAPTURE_FORK,)

    VALID = [
        Valid(
            """
            import torch

            def capture(g, side, x):
                with torch.cuda.graph(g):
                    capture = torch.cuda.current_stream()
                    side.wait_stream(capture)
                    with torch.cuda.stream(side):
                        y = x * 2
                    capture.wait_stream(side)
                return y
            """
        ),
        Valid(
            """
            import torch

            def capture(g, side, x):
                with torch.cuda.graph(g):
                    forked = torch.cuda.Event()
                    forked.record()
                    side.wait_event(forked)
                    with torch.cuda.stream(side):
                        y = x * 2
                        joined = side.record_event()
                    torch.cuda.current_stream().wait_event(joined)
                return y
            """
        ),
        Valid(
            """
            import torch

            def capture(g, s, side, x):
                with torch.cuda.stream(s):
                    g.capture_begin()
                    side.wait_stream(s)
                    with torch.cuda.stream(side):
                        y = x * 2
                    s.wait_stream(side)
                    g.capture_end()
                return y
            """
        ),
        Valid(
            """
            import torch

            def capture(g, s, x):
                with torch.cuda.graph(g, stream=s):
                    with torch.cuda.stream(s):
                        y = x * 2
                return y
            """
        ),
        Valid(
            """
            import torch

            def warmup(side, x):
                with torch.cuda.stream(side):
                    y = x * 2
                return y
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def capture(g, side, x):
                with torch.cuda.graph(g):
                    with torch.cuda.stream(side):
                        y = x * 2
                return y
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch

            def capture(g, side, x):
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.graph(g):
                    with torch.cuda.stream(side):
                        y = x * 2
                    torch.cuda.current_stream().wait_stream(side)
                return y
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch

            def capture(g, side, x):
                with torch.cuda.graph(g):
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        y = x * 2
                return y
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch

            def capture(g, s, side, x, flag):
                with torch.cuda.stream(s):
                    g.capture_begin()
                    side.wait_stream(s)
                    with torch.cuda.stream(side):
                        y = x * 2
                    if flag:
                        s.wait_stream(side)
                    g.capture_end()
                return y
            """,
            lines=(7,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.host_hazards:
            if hazard.kind == UNJOINED_CAPTURE_FORK:
                yield self.finding(flow.path, **flow.location(hazard), **host_fields(flow, hazard))
