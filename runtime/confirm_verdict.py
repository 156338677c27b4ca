"""Verdicts for `--confirm`: static findings against what the tests did under the sanitizer.

Pure: it takes the findings, the per-test outcomes and lines reached, and the sanitizer's
race reports (the JSON of `runtime/report.py`), and decides. No torch, no subprocess, so every
rule of the decision is testable on plain data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from csan_lint.lint.files import display_path
from csan_lint.lint.model import Finding, Span
from csan_lint.lint.registry import rule_by_code
from csan_lint.runtime import kinds

CONFIRMED = "confirmed"
DISMISSED = "dismissed"
UNEXERCISED = "unexercised"
ERROR = "error"
VERDICTS = (CONFIRMED, DISMISSED, UNEXERCISED, ERROR)

RUNTIME_ONLY_CODES: Mapping[str, str] = {
    kinds.READ_AFTER_WRITE: "CSL901",
    kinds.WRITE_AFTER_READ: "CSL902",
    kinds.WRITE_AFTER_WRITE: "CSL903",
    kinds.FREE_IN_USE: "CSL904",
    kinds.HOST_READ_PENDING: "CSL905",
    kinds.HOST_WRITE_PENDING: "CSL906",
    kinds.CAPTURE_ON_DEFAULT_STREAM: "CSL907",
    kinds.UNJOINED_CAPTURE_FORK: "CSL908",
    kinds.WAIT_UNRECORDED_EVENT: "CSL909",
}
"""The code a race gets when no static finding explains it: one per error kind, stable."""
UNKNOWN_KIND_CODE = "CSL999"
"""A kind this table does not know yet (a newer sanitizer): still reported, never dropped."""

# Outcomes of a test: pytest's, then the ones the runner decides.
PASSED, FAILED, SKIPPED, SETUP_ERROR = "passed", "failed", "skipped", "error"
CRASHED, TIMED_OUT, INTERNAL_ERROR = "crashed", "timeout", "internal-error"
BROKEN_OUTCOMES = frozenset({FAILED, SETUP_ERROR, CRASHED, TIMED_OUT, INTERNAL_ERROR})


@dataclass(frozen=True)
class TestRun:
    """One test as the sanitized run saw it. `reached` maps a real path to the lines it ran."""

    __test__ = False  # not a pytest test class, whatever imports it

    nodeid: str
    outcome: str
    reason: str | None = None
    reached: Mapping[str, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Race:
    """A sanitizer report (its `to_json` form) and the test during which it happened."""

    nodeid: str
    report: Mapping[str, Any]


@dataclass(frozen=True)
class RunResult:
    """Everything the runs produced. `broken_files` maps a test file (real path) that failed
    to be collected to the reason: its tests never ran, so what they would reach is unknown."""

    tests: Mapping[str, TestRun]
    races: Sequence[Race]
    broken_files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    finding: Finding
    verdict: str
    reason: str
    tests: tuple[str, ...] = ()
    race: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RuntimeOnly:
    """A race no finding explains: what the static half missed."""

    code: str
    kind: str
    path: str
    line: int
    message: str
    tests: tuple[str, ...]
    report: Mapping[str, Any]

    @property
    def is_race(self) -> bool:
        """False for the kinds the sanitizer calls warnings (a wait that orders nothing)."""
        return bool(self.report.get("severity", "error") != "warning")


def real(path: str) -> str:
    """The path with symlinks resolved: how findings, coverage and stacks are compared."""
    return os.path.realpath(path)


def _span_text(span: Span) -> str:
    if span.start_line == span.end_line:
        return f"line {span.start_line}"
    return f"lines {span.start_line}-{span.end_line}"


def _access_frames(report: Mapping[str, Any]) -> Iterable[tuple[str, int]]:
    """(real path, line) of every frame of both accesses. The free and the host access are the
    `current` access of their reports. For a free in use, the allocation site counts too: the
    hazard is the block allocated there (a missing `record_stream` is flagged where the tensor
    is made, while the free happens wherever its last reference dies)."""
    sides = ["current", "previous"]
    if report.get("kind") == kinds.FREE_IN_USE:
        sides.append("allocation")
    for side in sides:
        access = report.get(side) or {}
        for frame in access.get("stack") or ():
            yield real(frame["file"]), int(frame["line"])


def _matches(finding: Finding, path: str, kind: object, frames: frozenset[tuple[str, int]]) -> bool:
    rule = rule_by_code(finding.code)
    if rule is None or kind not in rule.confirmed_by:
        return False
    return any(file == path and line in finding.span for file, line in frames)


def _tests_text(count: int) -> str:
    return "1 test" if count == 1 else f"{count} tests"


def _broken_reason(test: TestRun) -> str:
    what = {
        FAILED: "failed",
        SETUP_ERROR: "errored in setup or teardown",
        CRASHED: "crashed",
        TIMED_OUT: "timed out",
        INTERNAL_ERROR: "was not fully checked",
    }[test.outcome]
    return f"{test.nodeid} {what}" + (f": {test.reason}" if test.reason else "")


def decide(
    findings: Sequence[Finding],
    run: RunResult,
    reaching_files: Mapping[str, frozenset[str]],
) -> tuple[list[Verdict], list[RuntimeOnly]]:
    """A verdict per finding (same order) and the races no finding explains.

    `reaching_files` maps each flagged file (real path) to the test files (real paths) that
    import it, transitively: only used to say why a finding was not reached.
    """
    paths = [real(finding.path) for finding in findings]
    frames = [frozenset(_access_frames(race.report)) for race in run.races]
    explained: set[int] = set()
    verdicts: list[Verdict] = []
    for finding, path in zip(findings, paths, strict=True):
        if rule_by_code(finding.code) is None:
            verdicts.append(
                Verdict(finding, ERROR, f"{finding.code} is not a stream rule: nothing to run")
            )
            continue
        matched = [
            i
            for i, race in enumerate(run.races)
            if _matches(finding, path, race.report.get("kind"), frames[i])
        ]
        explained.update(matched)
        if matched:
            tests = tuple(dict.fromkeys(run.races[i].nodeid for i in matched))
            verdicts.append(
                Verdict(finding, CONFIRMED, finding.message, tests, run.races[matched[0]].report)
            )
            continue
        reached = [
            test
            for test in run.tests.values()
            if any(line in finding.span for line in test.reached.get(path, ()))
        ]
        broken = [test for test in reached if test.outcome in BROKEN_OUTCOMES]
        clean = len(reached) - len(broken)
        tests = tuple(test.nodeid for test in reached)
        if broken:
            reason = _broken_reason(broken[0])
            if clean:
                reason += f" (the block also ran cleanly in {_tests_text(clean)})"
            verdicts.append(Verdict(finding, ERROR, reason, tests))
        elif reached:
            verdicts.append(
                Verdict(finding, DISMISSED, f"block ran in {_tests_text(clean)}, no race", tests)
            )
        else:
            verdicts.append(_not_reached(finding, path, run, reaching_files))
    runtime_only = _runtime_only(
        [race for i, race in enumerate(run.races) if i not in explained]
    )
    return verdicts, runtime_only


def _not_reached(
    finding: Finding,
    path: str,
    run: RunResult,
    reaching_files: Mapping[str, frozenset[str]],
) -> Verdict:
    importers = reaching_files.get(path, frozenset())
    broken = sorted(set(run.broken_files) & importers)
    if broken:
        return Verdict(
            finding,
            ERROR,
            f"{display_path(Path(broken[0]))} could not be collected: {run.broken_files[broken[0]]}",
        )
    if not importers:
        return Verdict(finding, UNEXERCISED, f"no test imports {finding.path}")
    reason = f"no test reached {_span_text(finding.span)}"
    skipped = sum(
        1
        for test in run.tests.values()
        if test.outcome == SKIPPED and real(nodeid_file(test.nodeid)) in importers
    )
    if skipped:
        reason += f" ({_tests_text(skipped)} that import it skipped)"
    return Verdict(finding, UNEXERCISED, reason)


def nodeid_file(nodeid: str) -> str:
    """The file part of a node id (`tests/test_a.py::TestX::test_y[1]` -> `tests/test_a.py`)."""
    return nodeid.split("::", 1)[0]


def _site(frames: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """Innermost frame: the stacks in reports are user frames, innermost last."""
    if not frames:
        return None
    return frames[-1]["file"], int(frames[-1]["line"])


def _race_key(report: Mapping[str, Any]) -> tuple[Any, ...]:
    """Same kind between the same two lines: one runtime-only entry, whatever the tests and
    operators (`x.mean()` and `x.std()` on one line reading one unsynced tensor is one bug)."""
    current = report.get("current") or {}
    previous = report.get("previous") or {}
    return (
        report.get("kind"),
        _site(current.get("stack") or ()),
        _site(previous.get("stack") or ()),
    )


def _runtime_only(races: Sequence[Race]) -> list[RuntimeOnly]:
    """One entry per distinct race (the same race seen by several tests is listed once)."""
    grouped: dict[tuple[Any, ...], list[Race]] = {}
    for race in races:
        grouped.setdefault(_race_key(race.report), []).append(race)
    found = []
    for group in grouped.values():
        report = group[0].report
        kind = str(report.get("kind"))
        current = report.get("current") or {}
        site = _site(current.get("stack") or ()) or _site(
            (report.get("allocation") or {}).get("stack") or ()
        )
        file, line = site if site else ("<unknown>", 0)
        found.append(
            RuntimeOnly(
                code=RUNTIME_ONLY_CODES.get(kind, UNKNOWN_KIND_CODE),
                kind=kind,
                path=display_path(Path(file)),
                line=line,
                message=str(report.get("message") or kind),
                tests=tuple(dict.fromkeys(race.nodeid for race in group)),
                report=report,
            )
        )
    found.sort(key=lambda entry: (entry.path, entry.line, entry.code))
    return found
