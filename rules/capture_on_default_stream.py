"""CSL501: CUDA graph capture begun on the default stream."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import host_fields
from csan_lint.runtime.kinds import CAPTURE_ON_DEFAULT_STREAM


class CaptureOnDefaultStream(Rule):
    """
    ## What it does
    Flags `g.capture_begin()` reached outside any `with torch.cuda.stream(s):` block (or inside
    one on `torch.cuda.default_stream()`), where the stream that captures is the default one.
    `with torch.cuda.graph(g):` picks a side stream itself and is fine.

    ## Why is this bad?
    CUDA cannot capture the legacy default stream: it synchronizes with every other stream.
    PyTorch refuses with "CUDA graphs must be captured on a non-default stream", so the capture
    path fails the first time it runs on a GPU — often a path that CPU-only tests never reach.

    ## Assumptions
    The stream current where a function begins is the default stream (the caller's stream
    blocks are not looked at), unless the capture is inside a stream block of the function.

    ## Known problems
    A function is taken to be entered on the default stream: one that begins a capture and is
    always called inside its caller's stream block is reported, and the runtime check dismisses
    the finding.
    """

    code = "CSL501"
    name = "capture-on-default-stream"
    summary = "CUDA graph capture begun on the default stream"
    message = "graph '{graph}' begins capture on the default stream, which CUDA cannot capture"
    fix_title = (
        "capture with `with torch.cuda.graph({graph}):`, "
        "or call `{graph}.capture_begin()` inside `with torch.cuda.stream(side):`"
    )
    confirmed_by = (CAPTURE_ON_DEFAULT_STREAM,)

    VALID = [
        Valid(
            """
            import torch

            def capture(model, x):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = model(x)
                return g, y
            """
        ),
        Valid(
            """
            import torch

            def capture(model, x):
                g = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    g.capture_begin()
                    y = model(x)
                    g.capture_end()
                torch.cuda.current_stream().wait_stream(side)
                return g, y
            """
        ),
        Valid(
            """
            import torch

            def replay(g, static_x, x):
                static_x.copy_(x)
                g.replay()
            """
        ),
        Valid(
            """
            import torch

            def capture(g, s, model, x, warm):
                if warm:
                    with torch.cuda.stream(s):
                        g.capture_begin()
                        y = model(x)
                        g.capture_end()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            g = torch.cuda.CUDAGraph()
            g.capture_begin()
            y = torch.ones(3, device="cuda") * 2
            g.capture_end()
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch

            class Runner:
                def capture(self, x):
                    self.graph = torch.cuda.CUDAGraph()
                    self.graph.capture_begin()
                    self.out = self.model(x)
                    self.graph.capture_end()
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch

            def capture(g, model, x):
                with torch.cuda.stream(torch.cuda.default_stream()):
                    g.capture_begin()
                    y = model(x)
                    g.capture_end()
                return y
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch

            def capture(g, s, model, x):
                with torch.cuda.stream(s):
                    y = model(x)
                g.capture_begin(pool=None)
                y = model(x)
                g.capture_end()
            """,
            lines=(6,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.host_hazards:
            if hazard.kind == CAPTURE_ON_DEFAULT_STREAM:
                yield self.finding(flow.path, **flow.location(hazard), **host_fields(flow, hazard))
