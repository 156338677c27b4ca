"""What `--confirm` prints: one line per finding with its verdict, the races no finding explains,
a summary; or the same as JSON (docs/confirm.md), or as a JUnit XML report for CI test-report
viewers (docs/ci.md). Pure functions from verdicts to text."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from csan_lint.lint.shell.output import finding_to_dict
from csan_lint.lint.shell.runner import rule_names
from csan_lint.runtime.child_races import describe
from csan_lint.runtime.confirm_verdict import (
    CAUSES_OF_EXIT_2,
    CONFIRMED,
    ERROR,
    OUTSIDE_TESTS,
    UNEXERCISED,
    VERDICTS,
    RunResult,
    RuntimeOnly,
    StreamLeak,
    TestFailure,
    TestRun,
    Verdict,
    race_key,
)
from csan_lint.runtime.events import AccessRecord, AllocationRecord, RuntimeErrorReport
from csan_lint.runtime.report import render_text
from csan_lint.runtime.stacks import Frame

JSON_VERSION = 1


def _tests_suffix(tests: Sequence[str]) -> str:
    if not tests:
        return ""
    more = f", +{len(tests) - 1} more" if len(tests) > 1 else ""
    return f" ({tests[0]}{more})"


def summary_line(verdicts: Sequence[Verdict], runtime_only: Sequence[RuntimeOnly]) -> str:
    counts = ", ".join(f"{sum(v.verdict == name for v in verdicts)} {name}" for name in VERDICTS)
    return f"{counts}; {len(runtime_only)} runtime-only"


def _by_kind(kinds: Sequence[str]) -> str:
    """`3 read-after-write, 1 free-in-use`, most frequent first."""
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _sites_text(count: int) -> str:
    return "1 race site" if count == 1 else f"{count} race sites"


def summary_table(
    run: RunResult,
    runtime_only: Sequence[RuntimeOnly],
    seconds: float | None,
    failures: Sequence[TestFailure] = (),
) -> list[str]:
    """The tests run (by outcome), those that did not pass (by cause), the races seen and those no
    finding predicted (by kind, a race site being a kind between two lines, as runtime-only
    entries are), the time."""
    tests = [test for test in run.tests.values() if test.nodeid != OUTSIDE_TESTS]
    outcomes = _by_kind([test.outcome for test in tests])
    sites = {race_key(race.report) for race in run.races if race.report.get("severity", "error") == "error"}
    races = [str(kind) for kind, _, _ in sites]
    missed = [entry.kind for entry in runtime_only if entry.is_race]
    rows = [
        ("tests", f"{len(tests)} run" + (f": {outcomes}" if outcomes else "")),
        *([("failed", f"{len(failures)} did not pass: {_by_kind([f.cause for f in failures])}")] if failures else []),
        ("races", _sites_text(len(races)) + (f": {_by_kind(races)}" if races else "")),
        ("missed", f"{_sites_text(len(missed))} no finding predicted" + (f": {_by_kind(missed)}" if missed else "")),
    ]
    if seconds is not None:
        rows.append(("time", f"{seconds:.1f} s"))
    return [f"{name:<8}{value}" for name, value in rows]


def failure_lines(failures: Sequence[TestFailure]) -> list[str]:
    """pytest's short summary, one line per test that did not pass (a test that broke checked
    only what it ran before it broke), with the cause the run without the sanitizer tells."""
    return [
        f"{failure.outcome.upper()} {failure.nodeid} - {failure.reason or 'no reason given'} [{failure.explanation}]"
        for failure in failures
    ]


def _leak_line(leak: StreamLeak) -> str:
    return (
        f"note: {leak.nodeid} left stream {leak.stream} current on cuda:{leak.device}; "
        "the next test started on the default stream"
    )


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
    return tuple(Frame(str(frame["file"]), int(frame["line"]), str(frame.get("function", ""))) for frame in stack or ())


def _stream_sites(data: Mapping[str, Any]) -> tuple[tuple[int, tuple[Frame, ...]], ...]:
    """Where the report's streams were made (`stream_created` of each side), as one-frame stacks."""
    sites: dict[int, tuple[Frame, ...]] = {}
    for side in ("current", "previous", "allocation"):
        entry = data.get(side) or {}
        created = entry.get("stream_created")
        if created and entry.get("stream") is not None:
            sites[entry["stream"]] = _frames([created])
    return tuple(sites.items())


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
        stream_sites=_stream_sites(data),
        reallocation=_access(data.get("reallocation")),
    )


def render_race(data: Mapping[str, Any]) -> str:
    """The report as the sanitizer renders it; a child process's under a line naming it."""
    text = render_text(report_from_json(data))
    return f"csan: in {describe(data['child'])}:\n{text}" if data.get("child") else text


def format_text(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    verbose: bool = False,
    quiet: bool = False,
    run: RunResult | None = None,
    seconds: float | None = None,
    failures: Sequence[TestFailure] = (),
    notes: Sequence[str] = (),
) -> str:
    """A line per finding (an error's reason names its test already; a confirmed one gets its
    `help:`), the runtime-only races, the streams tests left current, then (unless `quiet`) a
    table of the run and the summary; `verbose` adds the sanitizer's report under each race. The
    tests that did not pass are listed even with `quiet`: they fail the run."""
    lines: list[str] = []
    for verdict in verdicts:
        finding = verdict.finding
        child = verdict.race.get("child") if verdict.race else None
        lines.append(
            f"{finding.path}:{finding.line}:{finding.column}: {finding.code} {verdict.verdict}  "
            f"{verdict.reason}{_tests_suffix(verdict.tests) if verdict.verdict != ERROR else ''}"
            + (f" [the race: in {describe(child)}]" if child else "")
        )
        if verdict.verdict == CONFIRMED and finding.fix:
            lines.append(f"    help: {finding.fix}")
        if verbose and verdict.race is not None:
            lines.append(textwrap.indent(render_race(verdict.race).rstrip(), "    "))
    for entry in runtime_only:
        label = "runtime-only" if entry.is_race else "runtime-only warning"
        lines.append(f"{entry.path}:{entry.line}: {entry.code} {label}  {entry.message}{_tests_suffix(entry.tests)}")
        if verbose:
            lines.append(textwrap.indent(render_race(entry.report).rstrip(), "    "))
    if run is not None:
        lines.extend(_leak_line(leak) for leak in run.leaks)
    lines.extend(notes)
    lines.extend(failure_lines(failures))
    if not quiet:
        if run is not None:
            lines.extend(summary_table(run, runtime_only, seconds, failures))
        lines.append(summary_line(verdicts, runtime_only))
    return "\n".join(lines) + "\n" if lines else ""


def format_json(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    device: str | None,
    test_files: Sequence[str],
    tests: Sequence[TestRun] = (),
    leaks: Sequence[StreamLeak] = (),
    failures: Sequence[TestFailure] = (),
    not_shown: Mapping[str, int] | None = None,
) -> str:
    """The document of docs/confirm.md; `not_shown` counts the races left out, by reason."""
    document = {
        "version": JSON_VERSION,
        "device": device,
        "test_files": list(test_files),
        "tests": [
            {"nodeid": test.nodeid, "outcome": test.outcome, "reason": test.reason, "gap": test.gap} for test in tests
        ],
        "failures": [
            {
                "nodeid": failure.nodeid,
                "outcome": failure.outcome,
                "reason": failure.reason,
                "cause": failure.cause,
                "unchecked_outcome": failure.unchecked,
            }
            for failure in failures
        ],
        "findings": [
            {
                **finding_to_dict(verdict.finding),
                "verdict": verdict.verdict,
                "reason": verdict.reason,
                "tests": list(verdict.tests),
                "runtime_report": verdict.race,
                "site_key": verdict.site,
            }
            for verdict in verdicts
        ],
        "stream_leaks": [{"nodeid": leak.nodeid, "device": leak.device, "stream": leak.stream} for leak in leaks],
        "runtime_only": [
            {
                "code": entry.code,
                "kind": entry.kind,
                "path": entry.path,
                "line": entry.line,
                "message": entry.message,
                "tests": list(entry.tests),
                "runtime_report": entry.report,
                "site_key": entry.site,
            }
            for entry in runtime_only
        ],
        "summary": summary_counts(verdicts, runtime_only, failures, not_shown),
    }
    return json.dumps(document, indent=2) + "\n"


def summary_counts(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    failures: Sequence[TestFailure],
    not_shown: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The findings by verdict, the runtime-only races, the tests that did not pass, the races
    left out: the JSON document's `summary` (and the SARIF run's)."""
    return {
        **{name: sum(v.verdict == name for v in verdicts) for name in VERDICTS},
        "runtime_only": len(runtime_only),
        "tests_failed": len(failures),
        "not_shown": dict(not_shown or {"ignored": 0, "suppressed": 0, "baseline": 0}),
    }


JUNIT_SUITE = "csan-lint --confirm"
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold at all (not even escaped): a test's output may contain them."""


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _classname(path: str) -> str:
    """`src/pkg/a.py` -> `src.pkg.a`: report viewers group test cases by dotted class name."""
    return path.removesuffix(".py").replace("\\", "/").strip("/").replace("/", ".")


def _testcase(suite: ET.Element, path: str, line: int, name: str) -> ET.Element:
    return ET.SubElement(
        suite, "testcase", classname=_xml(_classname(path)), name=_xml(name), file=_xml(path), line=str(line)
    )


def _outcome(case: ET.Element, tag: str, kind: str, message: str, details: str) -> None:
    element = ET.SubElement(case, tag, type=kind, message=_xml(message))
    if details:
        element.text = _xml(details)


def _details(reason: str, tests: Sequence[str], race: Mapping[str, Any] | None) -> str:
    lines = [reason, *(f"test: {test}" for test in tests)]
    if race is not None:
        lines.append(render_race(race).rstrip())
    return "\n".join(lines) + "\n"


def format_junit(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    fail_on: frozenset[str] = frozenset({CONFIRMED}),
    device: str | None = None,
    failures: Sequence[TestFailure] = (),
) -> str:
    """One test case per finding, then one per race no finding explains. A verdict in `fail_on`
    (confirmed, and what `--fail-on` adds) is a failure, `error` an error, `unexercised` (when not
    failing) skipped, the rest pass with the reason as their output: the report fails exactly
    when the exit status does (under `--exit-zero` too, so the viewer still shows the bug). Then
    one per test that did not pass: a failure, or an error when the check could not be made."""
    suite = ET.Element("testsuite", name=JUNIT_SUITE)
    if device is not None:
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="device", value=device)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for verdict in verdicts:
        finding = verdict.finding
        name = f"{finding.code} {rule_names().get(finding.code, '')} at {finding.path}:{finding.line}:{finding.column}"
        case = _testcase(suite, finding.path, finding.line, name)
        message = f"{verdict.verdict}: {verdict.reason}"
        details = _details(verdict.reason, verdict.tests, verdict.race)
        counts["tests"] += 1
        if verdict.verdict == ERROR:
            _outcome(case, "error", ERROR, message, details)
            counts["errors"] += 1
        elif verdict.verdict in fail_on:
            _outcome(case, "failure", verdict.verdict, message, details)
            counts["failures"] += 1
        elif verdict.verdict == UNEXERCISED:
            ET.SubElement(case, "skipped", message=_xml(message))
            counts["skipped"] += 1
        else:
            ET.SubElement(case, "system-out").text = _xml(details)
    for entry in runtime_only:
        case = _testcase(suite, entry.path, entry.line, f"{entry.code} runtime-only at {entry.path}:{entry.line}")
        details = _details(entry.message, entry.tests, entry.report)
        counts["tests"] += 1
        if entry.is_race:
            _outcome(case, "failure", "runtime-only", f"runtime-only: {entry.message}", details)
            counts["failures"] += 1
        else:
            ET.SubElement(case, "system-out").text = _xml(details)
    for failure in failures:
        path = failure.nodeid.split("::", 1)[0]
        case = _testcase(suite, path, 0, failure.nodeid)
        message = f"{failure.outcome}: {failure.reason or 'no reason given'} [{failure.explanation}]"
        tag = "error" if failure.cause in CAUSES_OF_EXIT_2 else "failure"
        _outcome(case, tag, failure.cause, message, "")
        counts["tests"] += 1
        counts["errors" if tag == "error" else "failures"] += 1
    root = ET.Element("testsuites", name=JUNIT_SUITE)
    for key, value in counts.items():
        root.set(key, str(value))
        suite.set(key, str(value))
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
