"""CSL104: a callable fixes the current stream when it is built and runs later, on another."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.analysis.assumptions import STALE_STREAM_CAPTURE
from csan_lint.lint.edits import current_stream_code
from csan_lint.lint.facts import ModuleFlow, StaleCapture
from csan_lint.lint.model import Finding, Span
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.values import code_of
from csan_lint.runtime.kinds import READ_AFTER_WRITE, WRITE_AFTER_WRITE


class StaleStreamCapture(Rule):
    """
    ## What it does
    Flags a callable built with the current stream fixed in it — `functools.partial(kernel,
    stream=torch.cuda.current_stream().cuda_stream)`, a lambda or a nested `def` handing a stream
    bound to `current_stream()` to a call — that leaves its function to run later (stored in an
    attribute, a container or through a call, or returned), at the captured stream.

    Until this rule had a code of its own these findings were CSL102's (`missing-join`): a
    `# noqa: CSL102` or a `--select`/`--ignore` that meant them must name CSL104 (or
    `stale-stream-capture`) now. CSL102 keeps its other findings, so its code is not redirected.

    ## Why is this bad?
    A callable run later launches its work on the stream fixed when it was built, while whoever
    runs it orders the consumers of its results after the stream current when it runs: those
    waits do not cover that work. Resolving the stream inside the callable captures nothing.

    ## Assumptions
    A callable holding the current stream is not reported when it is only called in the function
    that builds it, handed to a `with` item or to a builtin that calls it at once (`map`,
    `sorted`), or registered by a call whose handle that function `remove()`s; nor when it uses the
    stream only to enter it (`with torch.cuda.stream(s):`: it says where its work runs) or to order
    (`wait_stream`, `record_stream`, an event's `record`/`wait`), nor for a `current_stream()` read
    inside a stream block (the block's stream, chosen explicitly). Any other call it is passed to
    is taken to keep it. The assumption `stale-stream-capture` (docs/analysis.md) switches the
    whole rule off.

    ## Known problems
    A call that calls the callable at once and keeps nothing is still taken to keep it. A stream
    reached through an alias made inside the callable, or through an attribute
    (`self.s = current_stream()`), is not followed.
    """

    code = "CSL104"
    name = "stale-stream-capture"
    summary = "a callable fixes the current stream when it is built and runs later, on another"
    message = (
        "{callable} is built with the current stream fixed in it ('{capture}') and is {how} at line"
        " {escape_line} to run later: its work is launched on the stream current when it was built, so the"
        " waits that order its results after the stream current when it runs do not cover it"
    )
    fix_title = "resolve the stream when {callable} runs (`{current}` inside it) instead of capturing it"
    confirmed_by = (READ_AFTER_WRITE, WRITE_AFTER_WRITE)

    VALID = [
        Valid(
            """
            import functools
            import torch

            def backward(op, x, dy, out):
                gemm = functools.partial(wgrad_kernel, stream=None)  # the kernel asks current_stream() itself
                if op.delay:
                    op.store.put([x, dy, out], gemm)
                else:
                    gemm(x, dy, out)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import functools
            import torch

            def backward(op, x, dy, out):
                gemm = functools.partial(wgrad_kernel, stream=torch.cuda.current_stream().cuda_stream)
                if op.delay:
                    op.store.put([x, dy, out], gemm)
                else:
                    gemm(x, dy, out)
            """,
            lines=(5,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for capture in flow.stale_captures:
            yield self._stale(flow, capture)

    def _stale(self, flow: ModuleFlow, capture: StaleCapture) -> Finding:
        """At the captured stream, spanning the callable's making to where it leaves."""
        where = flow.range(capture.capture)
        lines = [flow.line(node) for node in (capture.built, capture.capture, capture.escape)]
        return self.finding(
            flow.path,
            line=where.start.line,
            column=where.start.column + 1,
            end_line=where.end.line,
            end_column=where.end.column + 1,
            span=Span(min(lines), max(lines)),
            assumptions=(STALE_STREAM_CAPTURE,),
            callable=capture.name,
            capture=code_of(capture.capture),
            how=capture.how,
            escape_line=str(flow.line(capture.escape)),
            current=current_stream_code(flow),
        )
