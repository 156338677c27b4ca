"""The facts the rules classify are computed by the analysis, once per module: the ordering a
stream hazard lacks, the host hazards and the stale stream captures are on `ModuleFlow` when
the driver returns, whichever rules run."""

from __future__ import annotations

import textwrap

import libcst as cst

from csan_lint.lint.analysis.assumptions import STALE_STREAM_CAPTURE, Assumptions
from csan_lint.lint.analysis.driver import module_facts
from csan_lint.lint.facts import HazardKind, Missing, ModuleFlow
from csan_lint.runtime.kinds import HOST_READ_PENDING


def flow_of(source: str, assumptions: Assumptions | None = None) -> ModuleFlow:
    source = textwrap.dedent(source)
    if assumptions is None:
        return module_facts(cst.parse_module(source), "m.py")
    return module_facts(cst.parse_module(source), "m.py", assumptions=assumptions)


def test_a_side_stream_reading_the_current_streams_result_lacks_a_fork() -> None:
    flow = flow_of(
        """
        import torch

        def forward(x, s):
            y = x * 2
            with torch.cuda.stream(s):
                z = y + 1
            torch.cuda.current_stream().wait_stream(s)
            return z
        """
    )
    assert [(hazard.kind, hazard.missing, flow.line(hazard.access.node)) for hazard in flow.hazards] == [
        (HazardKind.READ_AFTER_WRITE, Missing.FORK, 7)
    ]


def test_the_current_stream_reading_a_side_streams_result_lacks_a_join() -> None:
    flow = flow_of(
        """
        import torch

        def forward(x, s):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = x * 2
            return y + 1
        """
    )
    races = [hazard for hazard in flow.hazards if hazard.kind is HazardKind.READ_AFTER_WRITE]
    assert [(hazard.missing, flow.line(hazard.access.node)) for hazard in races] == [(Missing.JOIN, 8)]


def test_host_hazards_are_on_the_flow_analyse_returns() -> None:
    flow = flow_of(
        """
        import torch

        def fetch(x):
            out = x.to("cpu", non_blocking=True)
            return out.tolist()
        """
    )
    assert [(hazard.kind, flow.line(hazard.node)) for hazard in flow.host_hazards] == [(HOST_READ_PENDING, 6)]


STALE = """
import functools
import torch

def backward(op, x, dy, out):
    gemm = functools.partial(wgrad_kernel, stream=torch.cuda.current_stream().cuda_stream)
    op.store.put([x, dy, out], gemm)
"""


def test_stale_captures_are_on_the_flow_unless_the_assumption_is_off() -> None:
    flow = flow_of(STALE)
    assert [(capture.name, flow.line(capture.capture), capture.how) for capture in flow.stale_captures] == [
        ("'gemm'", 6, "passed to 'op.store.put'")
    ]
    assert flow_of(STALE, Assumptions.from_switches([(STALE_STREAM_CAPTURE, False)])).stale_captures == ()
