"""CSL103: a tensor read on one stream is overwritten on another before they are ordered."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.edits import Fix, attach, current_stream_code, join_before_use, wait_before_block
from csan_lint.lint.facts import Hazard, HazardKind, Missing, ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import message_fields
from csan_lint.runtime.kinds import WRITE_AFTER_READ


class CrossStreamOverwrite(Rule):
    """
    ## What it does
    Flags an in-place write (`x.copy_(...)`, `x.add_(...)`, `x[...] = ...`, `x += ...`,
    `out=x`) on one stream to a tensor that another stream read earlier, when the writing
    stream was not ordered after that read (write-after-read).

    ## Why is this bad?
    The reading kernel may not have run yet when the overwrite starts: it then reads the new
    values, or a mix of old and new. Reused buffers in prefetching and double-buffering loops
    are the usual victims: the copy for the next batch overwrites the buffer the compute stream
    is still reading.

    ## Assumptions
    An overwrite is an in-place op, `out=`, a collective writing its argument, an item or slice
    assignment into a tensor, or a called function's write; the reads it must wait for are the
    last ones on each other stream. `torch.*_like(x)`, `x.shape`, `len(x)`, `x is None` and
    `"key" in x` read no data.

    ## Known problems
    Only reads this function makes, and those of the functions it calls that are defined in the
    same module (or imported from another file linted in the same run), are known. A read of a
    parameter on a side stream still pending when the function returns is reported as the
    caller's next overwrite, with the exceptions CSL102 makes for pending writes, and only for a
    parameter annotated as a tensor or used as one here (`t.narrow(...)`), or one autograd or a
    module passes a hook (lint/hooks.py: it goes on with it after the hook), and neither
    `record_stream`ed nor given a new attribute (`p.grad.data = ...`) here. Rebinding a
    name (`x = ...`) makes a new tensor and is not an overwrite. A `g.replay()` reads and
    writes the tensors its `torch.cuda.graph(g)` block used in the same function (the capture
    itself, after its device sync, runs nothing); a graph captured in another method is not
    followed.
    """

    code = "CSL103"
    name = "cross-stream-overwrite"
    summary = "a tensor read on one stream is overwritten on another before they are ordered (WAR)"
    message = "'{tensor}' is read on {other} and then overwritten on {stream} before {waiter} waits for that read"
    fix_title = "call `{stream_code}.wait_stream({other_code})` before overwriting '{tensor}'"
    confirmed_by = (WRITE_AFTER_READ,)

    VALID = [
        Valid(
            """
            import torch

            def step(buf, s):
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    out = buf * 2
                torch.cuda.current_stream().wait_stream(s)
                buf.zero_()
                return out
            """
        ),
        Valid(
            """
            import torch

            def step(buf, s):
                with torch.cuda.stream(s):
                    out = buf * 2
                    buf.zero_()
                    done = s.record_event()
                torch.cuda.current_stream().wait_event(done)
                return out
            """
        ),
        Valid(
            """
            import torch

            def pipeline(batches, s):
                buf = torch.empty(8, device="cuda")
                for b in batches:
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        buf.copy_(b, non_blocking=True)
                    torch.cuda.current_stream().wait_stream(s)
                    total = buf.sum()
            """
        ),
        Valid(
            """
            import torch

            def step(x, s):
                y = torch.relu(x)
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    z = y + 1
                torch.cuda.synchronize()
                y[0] = 3
                return z
            """
        ),
        Valid(
            """
            import torch

            def step(x, s):
                y = torch.relu(x)
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    z = y + 1
                torch.cuda.current_stream().wait_stream(s)
                y = torch.zeros(4, device="cuda")
                return z, y
            """
        ),
        Valid(
            """
            import torch

            class Head:
                def __init__(self, example):
                    self.static_input = example.clone()
                    self.side = torch.cuda.Stream()
                    self.side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(self.side):
                        self.sums = self.static_input.sum(dim=1)
                    torch.cuda.current_stream().wait_stream(self.side)

                def __call__(self, x):
                    self.static_input.copy_(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def step(buf, s):
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    out = buf * 2
                buf.zero_()
                torch.cuda.current_stream().wait_stream(s)
                return out
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch

            def step(x, s):
                y = torch.relu(x)
                s.wait_stream(torch.cuda.current_stream())
                z = y + 1
                with torch.cuda.stream(s):
                    y.copy_(x)
                torch.cuda.current_stream().wait_stream(s)
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch

            def pipeline(batches, s):
                buf = torch.empty(8, device="cuda")
                s.wait_stream(torch.cuda.current_stream())
                for b in batches:
                    with torch.cuda.stream(s):
                        buf.copy_(b, non_blocking=True)
                    torch.cuda.current_stream().wait_stream(s)
                    total = buf.sum()
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch

            def step(x, s, out):
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    y = out * 2
                torch.add(x, 1, out=out)
                torch.cuda.current_stream().wait_stream(s)
                return y
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch

            class Head:
                def __init__(self, example):
                    self.static_input = example.clone()
                    self.side = torch.cuda.Stream()
                    self.side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(self.side):
                        self.sums = self.static_input.sum(dim=1)

                def __call__(self, x):
                    self.static_input.copy_(x)
            """,
            lines=(12,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.hazards:
            if hazard.kind is HazardKind.WRITE_AFTER_READ:
                fields = message_fields(hazard, current_stream_code(flow))
                finding = self.finding(flow.path, **flow.location(hazard), **fields)
                yield attach(finding, wait_before_overwrite(flow, hazard))


def wait_before_overwrite(flow: ModuleFlow, hazard: Hazard) -> Fix | None:
    """Order the overwriting stream after the read. A read on the current stream is waited for
    just before the overwriting block (as CSL101 fixes); a read on a named stream, just before
    the overwriting statement (as CSL102 fixes)."""
    if hazard.missing is Missing.FORK:
        return wait_before_block(flow, hazard)
    return join_before_use(flow, hazard)
