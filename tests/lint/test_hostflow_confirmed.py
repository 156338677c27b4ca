"""Each host-side rule's bug, run on the emulated device: the sanitizer reports the kind the rule
declares in `confirmed_by`, at a user frame inside the finding's span (what `--confirm` matches
on), and the fixed twin neither is flagged nor races."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from csan_lint.lint.engine import lint_source
from csan_lint.lint.registry import rule_by_code
from csan_lint.runtime import sanitize
from csan_lint.runtime.report import to_json

PAIRS = {
    "CSL301": (
        """
        import torch
        x = torch.arange(4.0, device="cuda")
        host = x.to("cpu", non_blocking=True)
        values = host.tolist()
        """,
        """
        import torch
        x = torch.arange(4.0, device="cuda")
        host = x.to("cpu", non_blocking=True)
        torch.cuda.current_stream().synchronize()
        values = host.tolist()
        assert values == [0.0, 1.0, 2.0, 3.0]
        """,
    ),
    "CSL302": (
        """
        import torch
        staging = torch.empty(4).pin_memory()
        out = []
        for step in range(3):
            staging.fill_(step)
            out.append(staging.to("cuda", non_blocking=True))
        """,
        """
        import torch
        staging = torch.empty(4).pin_memory()
        out = []
        for step in range(3):
            staging.fill_(step)
            out.append(staging.to("cuda", non_blocking=True))
            torch.cuda.current_stream().synchronize()
        assert [t.sum().item() for t in out] == [0.0, 4.0, 8.0]
        """,
    ),
    "CSL401": (
        """
        import torch
        x = torch.ones(8, device="cuda")
        ready = torch.cuda.Event()
        side = torch.cuda.Stream()
        side.wait_event(ready)
        """,
        """
        import torch
        x = torch.ones(8, device="cuda")
        ready = torch.cuda.Event()
        side = torch.cuda.Stream()
        ready.record()
        side.wait_event(ready)
        """,
    ),
    "CSL501": (
        """
        import torch
        graph = torch.cuda.CUDAGraph()
        try:
            graph.capture_begin()
        except RuntimeError:
            pass
        """,
        """
        import torch
        x = torch.ones(8, device="cuda")
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.capture_begin()
            y = x * 2
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        """,
    ),
    "CSL502": (
        """
        import torch
        x = torch.ones(8, device="cuda")
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        try:
            with torch.cuda.graph(graph):
                with torch.cuda.stream(side):
                    y = x * 2
        except RuntimeError:
            pass
        """,
        """
        import torch
        x = torch.ones(8, device="cuda")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.graph(graph):
            capture = torch.cuda.current_stream()
            side.wait_stream(capture)
            with torch.cuda.stream(side):
                y = x * 2
            capture.wait_stream(side)
        graph.replay()
        torch.cuda.synchronize()
        """,
    ),
}


def _run(code: str, tmp_path: Path, name: str) -> tuple[list, list[dict]]:
    """(findings of the rule, runtime reports as JSON) for the snippet saved as a module."""
    source = textwrap.dedent(code).lstrip("\n")
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    rule = rule_by_code(name.split("_")[0])
    assert rule is not None
    findings = lint_source(source, str(path), rules=[rule])
    with sanitize(device="emulated") as sanitizer:
        runpy.run_path(str(path))
    return findings, [to_json(error) for error in sanitizer.errors]


def _frames(report: dict, path: Path) -> set[int]:
    sides = [report["current"], report.get("previous") or {}, report.get("allocation") or {}]
    return {
        frame["line"]
        for side in sides
        for frame in side.get("stack") or ()
        if Path(frame["file"]).resolve() == path.resolve()
    }


@pytest.mark.parametrize("code", sorted(PAIRS))
def test_bug_is_flagged_and_confirmed_by_the_declared_kind(code: str, tmp_path: Path) -> None:
    rule = rule_by_code(code)
    assert rule is not None
    findings, reports = _run(PAIRS[code][0], tmp_path, f"{code}_bug")
    [finding] = findings
    matching = [
        report
        for report in reports
        if report["kind"] in rule.confirmed_by
        and any(line in finding.span for line in _frames(report, tmp_path / f"{code}_bug.py"))
    ]
    assert matching, reports


@pytest.mark.parametrize("code", sorted(PAIRS))
def test_fixed_twin_is_neither_flagged_nor_racing(code: str, tmp_path: Path) -> None:
    rule = rule_by_code(code)
    assert rule is not None
    findings, reports = _run(PAIRS[code][1], tmp_path, f"{code}_fixed")
    assert findings == []
    assert [report for report in reports if report["kind"] in rule.confirmed_by] == []
