"""What `--confirm` prints: one line per finding with its verdict, the races no finding explains,
a summary; or the same as JSON (docs/confirm.md). Pure functions from verdicts to text."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from csan_lint.lint.output import finding_to_dict
from csan_lint.runtime.confirm_verdict import VERDICTS, RuntimeOnly, TestRun, Verdict
from csan_lint.runtime.events import AccessRecord, AllocationRecord, RuntimeErrorReport
from csan_lint.runtime.stacks import Frame

JSON_VERSION = 1


def _tests_suffix(tests: Sequence[str]) -> str:
    if not tests:
        return ""
    more = f", +{len(tests) - 1} more" if len(tests) > 1 else ""
    return f" ({tests[0]}{more})"


def summary_line(verdicts: Sequence[Verdict], runtime_only: Sequence[RuntimeOnly]) -> str:
    counts = ", ".join(
        f"{sum(v.verdict == name for v in verdicts)} {name}" for name in VERDICTS
    )
    return f"{counts}; {len(runtime_only)} runtime-only"


def _access(data: Mapping[str, Any] | None) -> AccessRecord | None:
    if not data:
        return None
    return AccessRecord(
        stream=data.get("stream", -1),
        operator=data.get("operator", ""),
        argument=data.get("argument", ""),
        is_write=bool(data.get("is_write")),
        stack=_frames(data.get("stack")),
    )


def _frames(stack: Sequence[Mapping[str, Any]] | None) -> tuple[Frame, ...]:
    return tuple(
        Frame(str(frame["file"]), int(frame["line"]), str(frame.get("function", "")))
        for frame in stack or ()
    )


def report_from_json(data: Mapping[str, Any]) -> RuntimeErrorReport:
    """The engine's report back from its JSON (`report.to_json`), to render it the same way."""
    allocation = data.get("allocation")
    current = _access(data.get("current"))
    return RuntimeErrorReport(
        kind=str(data.get("kind")),
        current=current if current is not None else AccessRecord(-1, "", "", False, ()),
        previous=_access(data.get("previous")),
        allocation=AllocationRecord(
            ptr=allocation.get("ptr", 0),
            size=allocation.get("size", 0),
            stream=allocation.get("stream"),
            stack=_frames(allocation.get("stack")),
        )
        if allocation
        else None,
    )


def render_race(data: Mapping[str, Any]) -> str:
    from csan_lint.runtime.report import render_text

    return render_text(report_from_json(data))


def format_text(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    verbose: bool = False,
    quiet: bool = False,
) -> str:
    lines: list[str] = []
    for verdict in verdicts:
        finding = verdict.finding
        lines.append(
            f"{finding.path}:{finding.line}:{finding.column}: {finding.code} {verdict.verdict}  "
            f"{verdict.reason}{_tests_suffix(verdict.tests) if verdict.verdict != 'error' else ''}"
        )
        if verbose and verdict.race is not None:
            lines.append(textwrap.indent(render_race(verdict.race).rstrip(), "    "))
    for entry in runtime_only:
        lines.append(
            f"{entry.path}:{entry.line}: {entry.code} runtime-only  {entry.message}"
            f"{_tests_suffix(entry.tests)}"
        )
        if verbose:
            lines.append(textwrap.indent(render_race(entry.report).rstrip(), "    "))
    if not quiet:
        lines.append(summary_line(verdicts, runtime_only))
    return "\n".join(lines) + "\n" if lines else ""


def format_json(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    device: str | None,
    test_files: Sequence[str],
    tests: Sequence[TestRun] = (),
) -> str:
    document = {
        "version": JSON_VERSION,
        "device": device,
        "test_files": list(test_files),
        "tests": [{"nodeid": test.nodeid, "outcome": test.outcome, "reason": test.reason} for test in tests],
        "findings": [
            {
                **finding_to_dict(verdict.finding),
                "verdict": verdict.verdict,
                "reason": verdict.reason,
                "tests": list(verdict.tests),
                "runtime_report": verdict.race,
            }
            for verdict in verdicts
        ],
        "runtime_only": [
            {
                "code": entry.code,
                "kind": entry.kind,
                "path": entry.path,
                "line": entry.line,
                "message": entry.message,
                "tests": list(entry.tests),
                "runtime_report": entry.report,
            }
            for entry in runtime_only
        ],
        "summary": {
            **{name: sum(v.verdict == name for v in verdicts) for name in VERDICTS},
            "runtime_only": len(runtime_only),
        },
    }
    return json.dumps(document, indent=2) + "\n"
