"""`--confirm --format sarif`: the confirmed run as a SARIF 2.1.0 log (lint/shell/sarif.py's, for code
scanning services), in one run with the static check's rules and the runtime codes.

Each static finding is a result with its verdict: a verdict that fails the run (`confirmed`,
and what `--fail-on` adds) is a `fail` at level error; `error` and `other-race` need `review`,
`unexercised` stays `open`, `dismissed` is a `pass` (SARIF's level is `none` for those). Each
race no finding explains is a `fail` under its CSL9xx rule (CSL909, a wait that orders nothing,
a warning). A race's accesses (the racing one, the one it races with, and for a free in use the
allocation and the reallocation) and the places its streams were created are the result's
`relatedLocations`, each saying what happened there on which stream (`stream created at
model.py:12 (self.side)`), and their whole stacks are its `stacks`. The tests that did not pass
are the invocation's notifications.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from csan_lint.lint.diagnostics import TOOL_ERROR_CODES
from csan_lint.lint.shell.files import display_path
from csan_lint.lint.shell.sarif import (
    artifact_location,
    finding_result,
    rule_indexes,
    sarif_run_log,
    static_descriptors,
)
from csan_lint.runtime import kinds
from csan_lint.runtime.confirm_output import failure_lines, summary_counts
from csan_lint.runtime.confirm_verdict import (
    CAUSES_OF_EXIT_2,
    CONFIRMED,
    DISMISSED,
    UNEXERCISED,
    RuntimeOnly,
    TestFailure,
    TestRun,
    Verdict,
)
from csan_lint.runtime.events import WARNING_KINDS
from csan_lint.runtime.tracker import FREE_OPERATOR, REALLOCATION_OPERATOR

UNKNOWN_KIND_SUMMARY = "a race of a kind this csan-lint does not know (a newer sanitizer's)"
_ROLES = {
    "current": "the racing access",
    "previous": "the access it races with",
    "allocation": "the allocation",
    "reallocation": "the reallocation",
}
"""A report's sites, in the order they are listed, and what each is called."""
_BLOCK_EVENTS = {FREE_OPERATOR: "the free", REALLOCATION_OPERATOR: "the reallocation"}
"""The pseudo-operators of a free in use's accesses."""
SITE_KEY = "csanSiteKey/v1"
"""The `partialFingerprints` entry holding a race's site key (what `--baseline` matches)."""


def _runtime_descriptor(code: str, kind: str, summary: str) -> dict[str, Any]:
    name = kinds.RuntimeCode(code, kind, summary).name
    return {
        "id": code,
        "name": name,
        "shortDescription": {"text": summary},
        "help": {"text": f"{code} {name}: {summary}. Reported by the sanitizer under --confirm."},
        "defaultConfiguration": {"level": "warning" if kind in WARNING_KINDS else "error"},
        "properties": {"runtimeKind": kind},
    }


def runtime_descriptors() -> list[dict[str, Any]]:
    """The runtime codes (`kinds.RUNTIME_CODES`), then the code of a kind not known yet."""
    known = [_runtime_descriptor(entry.code, entry.kind, entry.summary) for entry in kinds.RUNTIME_CODES]
    return [*known, _runtime_descriptor(kinds.UNKNOWN_KIND_CODE, "unknown", UNKNOWN_KIND_SUMMARY)]


def _physical(path: str, line: int) -> dict[str, Any]:
    """A file's line; a path under the working directory is shown relative to it."""
    location: dict[str, Any] = {"artifactLocation": artifact_location(display_path(Path(path)))}
    if line >= 1:
        location["region"] = {"startLine": line}
    return location


def _placed(stack: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The frame a site points at: the innermost one that is not a decorator's wrapper."""
    frames = [frame for frame in stack if not frame.get("wrapper")] or list(stack)
    return frames[-1] if frames else None


def _site_text(role: str, site: Mapping[str, Any]) -> str:
    """`the racing access: `aten::add` reads on stream created at m.py:12 (side)`; a block's
    allocation, free and reallocation by what they are."""
    stream = site.get("stream_name")
    operator = str(site.get("operator") or "?").split("(", 1)[0]
    if role == "allocation" or operator in _BLOCK_EVENTS:
        return f"{_BLOCK_EVENTS.get(operator, _ROLES['allocation'])}, on {stream}"
    return f"{_ROLES[role]}: `{operator}` {'writes' if site.get('is_write') else 'reads'} on {stream}"


def _race_locations(report: Mapping[str, Any], first_id: int) -> list[dict[str, Any]]:
    """The report's sites, then where each of its streams was created, numbered from `first_id`."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    created: dict[tuple[str, int], str] = {}
    for role in _ROLES:
        site = report.get(role) or {}
        frame = _placed(site.get("stack") or ())
        if frame is not None:
            found.append((_site_text(role, site), frame))
        made = site.get("stream_created")
        if made:
            created.setdefault((made["file"], int(made["line"])), str(site.get("stream_name")))
    found += [(str(name), {"file": file, "line": line}) for (file, line), name in created.items()]
    return [
        {"id": number, "message": {"text": text}, "physicalLocation": _physical(frame["file"], int(frame["line"]))}
        for number, (text, frame) in enumerate(found, start=first_id)
    ]


def _stacks(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each site's stack, innermost frame first as SARIF orders them."""
    stacks = []
    for role, title in _ROLES.items():
        frames = (report.get(role) or {}).get("stack") or ()
        if frames:
            stacks.append(
                {
                    "message": {"text": title},
                    "frames": [
                        {
                            "location": {
                                "physicalLocation": _physical(frame["file"], int(frame["line"])),
                                "logicalLocations": [{"name": str(frame.get("function") or "")}],
                            }
                        }
                        for frame in reversed(frames)
                    ],
                }
            )
    return stacks


def _with_race(result: dict[str, Any], report: Mapping[str, Any] | None) -> dict[str, Any]:
    if report:
        related = result.setdefault("relatedLocations", [])
        related += _race_locations(report, len(related) + 1)
        result["stacks"] = _stacks(report)
        result["properties"]["runtimeReport"] = report
    return result


def _verdict_kind(verdict: str, fail_on: frozenset[str]) -> str:
    if verdict in fail_on:
        return "fail"
    return {DISMISSED: "pass", UNEXERCISED: "open"}.get(verdict, "review")


def _verdict_result(verdict: Verdict, index: Mapping[str, int], fail_on: frozenset[str]) -> dict[str, Any]:
    finding = verdict.finding
    result = finding_result(finding, index[finding.code])
    kind = _verdict_kind(verdict.verdict, fail_on)
    result["kind"] = kind
    result["level"] = "error" if kind == "fail" else "none"
    said = verdict.verdict if verdict.reason in ("", finding.message) else f"{verdict.verdict}: {verdict.reason}"
    result["message"] = {"text": f"{finding.message} [{said}]"}
    result["properties"].update(verdict=verdict.verdict, verdictReason=verdict.reason, tests=list(verdict.tests))
    if verdict.site:
        result["partialFingerprints"] = {SITE_KEY: verdict.site}
    return _with_race(result, verdict.race)


def _runtime_result(entry: RuntimeOnly, index: Mapping[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": entry.code,
        "ruleIndex": index[entry.code],
        "kind": "fail",
        "level": "error" if entry.is_race else "warning",
        "message": {"text": entry.message},
        "locations": [{"physicalLocation": _physical(entry.path, entry.line)}] if entry.line >= 1 else [],
        "properties": {"runtimeKind": entry.kind, "tests": list(entry.tests)},
    }
    if entry.site:
        result["partialFingerprints"] = {SITE_KEY: entry.site}
    return _with_race(result, entry.report)


def _notification(failure: TestFailure, line: str) -> dict[str, Any]:
    return {
        "level": "error",
        "message": {"text": line},
        "locations": [{"physicalLocation": _physical(os.path.abspath(failure.nodeid.split("::", 1)[0]), 0)}],
        "properties": {
            "nodeid": failure.nodeid,
            "outcome": failure.outcome,
            "cause": failure.cause,
            "uncheckedOutcome": failure.unchecked,
        },
    }


def confirm_sarif_log(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    *,
    fail_on: frozenset[str] = frozenset({CONFIRMED}),
    device: str | None = None,
    test_files: Sequence[str] = (),
    tests: Sequence[TestRun] = (),
    failures: Sequence[TestFailure] = (),
    not_shown: Mapping[str, int] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """The log as a JSON-ready dict. The run could not check what it was asked to (not
    `executionSuccessful`) when a file went unchecked statically or a test failed on the
    emulated device's gap or the sanitizer's error (exit 2)."""
    descriptors = static_descriptors() + runtime_descriptors()
    index = rule_indexes(descriptors)
    unchecked = any(verdict.finding.code in TOOL_ERROR_CODES for verdict in verdicts)
    invocation = {
        "executionSuccessful": not unchecked and not any(failure.cause in CAUSES_OF_EXIT_2 for failure in failures),
        "toolExecutionNotifications": [
            _notification(failure, line) for failure, line in zip(failures, failure_lines(failures), strict=True)
        ],
    }
    properties = {
        "device": device,
        "testFiles": list(test_files),
        "tests": [{"nodeid": test.nodeid, "outcome": test.outcome} for test in tests],
        "summary": summary_counts(verdicts, runtime_only, failures, not_shown),
    }
    results = [_verdict_result(verdict, index, fail_on) for verdict in verdicts]
    results += [_runtime_result(entry, index) for entry in runtime_only]
    return sarif_run_log(descriptors, results, invocation, properties, cwd)


def format_confirm_sarif(verdicts: Sequence[Verdict], runtime_only: Sequence[RuntimeOnly], **options: Any) -> str:
    return json.dumps(confirm_sarif_log(verdicts, runtime_only, **options), indent=2) + "\n"
