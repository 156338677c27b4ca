"""Verdicts for `--confirm`: static findings against what the tests did under the sanitizer.

Pure: it takes the findings, the per-test outcomes and lines reached, and the sanitizer's
race reports (the JSON of `runtime/report.py`), and decides. No torch, no subprocess, so every
rule of the decision is testable on plain data.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.registry import rule_by_code
from csan_lint.lint.shell.files import display_path
from csan_lint.runtime import kinds
from csan_lint.runtime.stacks import is_user_file

CONFIRMED = "confirmed"
DISMISSED = "dismissed"
UNEXERCISED = "unexercised"
ERROR = "error"
OTHER_RACE = "other-race"
"""The finding's block raced, but not as it predicts: another kind, or away from its lines."""
VERDICTS = (CONFIRMED, OTHER_RACE, DISMISSED, UNEXERCISED, ERROR)

OUTSIDE_TESTS = "<outside any test>"
"""Stands for a node id where there is none: imports at collection, session teardown."""

# Outcomes of a test: pytest's, then the ones the runner decides.
PASSED, FAILED, SKIPPED, SETUP_ERROR = "passed", "failed", "skipped", "error"
CRASHED, TIMED_OUT, INTERNAL_ERROR = "crashed", "timeout", "internal-error"
BROKEN_OUTCOMES = frozenset({FAILED, SETUP_ERROR, CRASHED, TIMED_OUT, INTERNAL_ERROR})
RERUN_OUTCOMES = frozenset({FAILED, SETUP_ERROR, CRASHED, TIMED_OUT})
"""Failures that the sanitizer may have caused: their tests run again without it."""


@dataclass(frozen=True)
class TestRun:
    """One test as the sanitized run saw it. `reached` maps a real path to the lines it ran."""

    __test__ = False  # not a pytest test class, whatever imports it

    nodeid: str
    outcome: str
    reason: str | None = None
    reached: Mapping[str, frozenset[int]] = field(default_factory=dict)
    gap: str | None = None
    """The emulated device's gap the test failed on (emulation/gaps.py's message), if it did."""


@dataclass(frozen=True)
class Race:
    """A sanitizer report (its `to_json` form) and the test during which it happened."""

    nodeid: str
    report: Mapping[str, Any]


@dataclass(frozen=True)
class StreamLeak:
    """A test that left a non-default stream current (the plugin restored the default one)."""

    nodeid: str
    device: int
    stream: int


@dataclass(frozen=True)
class RunResult:
    """Everything the runs produced. `broken_files` maps a test file (real path) that failed
    to be collected to the reason: its tests never ran, so what they would reach is unknown."""

    tests: Mapping[str, TestRun]
    races: Sequence[Race]
    broken_files: Mapping[str, str] = field(default_factory=dict)
    leaks: Sequence[StreamLeak] = ()


# Why a test failed, as the run of the failing tests without the sanitizer tells.
EMULATION_GAP = "emulation-gap"
"""On the emulated device's own gap: the check could not be made (exit 2)."""
SANITIZER_ERROR = "sanitizer-error"
"""The sanitizer failed in the test (an internal error): the check could not be made (exit 2)."""
ONLY_CHECKED = "only-under-the-sanitizer"
"""It passed without the sanitizer: the sanitizer changed what it did."""
ALSO_UNCHECKED = "also-without-the-sanitizer"
"""It failed without the sanitizer too: the test's own failure, as pytest would report it."""
NOT_RERUN = "not-rerun"
"""Its run without the sanitizer did not finish (or could not start): the cause is unknown."""
NOT_COLLECTED = "not-collected"
"""A test file that could not be imported: its tests never ran."""
CAUSES_OF_EXIT_2 = frozenset({EMULATION_GAP, SANITIZER_ERROR})


@dataclass(frozen=True)
class TestFailure:
    """A test (or a test file) that did not pass under the sanitizer, and why."""

    __test__ = False

    nodeid: str
    outcome: str
    reason: str | None
    cause: str
    unchecked: str | None = None
    """Its outcome without the sanitizer (None when it was not run so)."""

    @property
    def explanation(self) -> str:
        """The cause in words, for the reader of the output."""
        if self.cause == EMULATION_GAP:
            return "emulation gap: not the test's failure"
        if self.cause == SANITIZER_ERROR:
            return "csan-lint's error: please report it"
        if self.cause == ONLY_CHECKED:
            return f"only under the sanitizer: {self.unchecked} without it"
        if self.cause == ALSO_UNCHECKED:
            return f"also without the sanitizer ({self.unchecked}): the test's own failure"
        if self.cause == NOT_COLLECTED:
            return "its tests did not run"
        return "not re-run without the sanitizer" + (f" ({self.unchecked})" if self.unchecked else "")


def needs_unchecked_run(test: TestRun) -> bool:
    """A failed test whose cause only its run without the sanitizer can tell."""
    return test.outcome in RERUN_OUTCOMES and test.gap is None and test.nodeid != OUTSIDE_TESTS


def failures_of(run: RunResult, unchecked: Mapping[str, TestRun]) -> list[TestFailure]:
    """Every test that failed, errored, crashed, hung or was not fully checked, and every test file
    that could not be collected, with its cause; `unchecked` holds the failed tests' outcomes in
    the run without the sanitizer (by node id)."""
    found = [
        TestFailure(display_path(Path(path)), "not collected", reason, NOT_COLLECTED)
        for path, reason in sorted(run.broken_files.items())
    ]
    for test in run.tests.values():
        if test.outcome not in BROKEN_OUTCOMES:
            continue
        if test.gap is not None:
            found.append(TestFailure(test.nodeid, test.outcome, test.gap, EMULATION_GAP))
        elif test.outcome == INTERNAL_ERROR:
            found.append(TestFailure(test.nodeid, test.outcome, test.reason, SANITIZER_ERROR))
        else:
            again = unchecked.get(test.nodeid)
            if again is None or again.outcome not in (PASSED, *BROKEN_OUTCOMES):
                cause = NOT_RERUN
            else:
                cause = ALSO_UNCHECKED if again.outcome in BROKEN_OUTCOMES else ONLY_CHECKED
            found.append(TestFailure(test.nodeid, test.outcome, test.reason, cause, again.outcome if again else None))
    return found


def failures_status(failures: Sequence[TestFailure]) -> int:
    """0 none, 1 a test failed (the user's, the sanitizer's changed behaviour, unknown), 2 the
    check could not be made (an emulation gap, a sanitizer error): pytest's 1 for the first."""
    if any(failure.cause in CAUSES_OF_EXIT_2 for failure in failures):
        return 2
    return 1 if failures else 0


@dataclass(frozen=True)
class Verdict:
    finding: Finding
    verdict: str
    reason: str
    tests: tuple[str, ...] = ()
    race: Mapping[str, Any] | None = None
    site: str | None = None
    """A confirmed finding's site key (confirm_filter.py): how a later `--baseline` knows it."""


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
    site: str | None = None
    """Its site key (confirm_filter.py): how a later `--baseline` knows it."""

    @property
    def is_race(self) -> bool:
        """False for the kinds the sanitizer calls warnings (a wait that orders nothing)."""
        return bool(self.report.get("severity", "error") != "warning")


def real(path: str) -> str:
    """The path with symlinks resolved: how findings, coverage and stacks are compared."""
    return os.path.realpath(path)


_NAMED_LINE = re.compile(r"\bline (\d+)")
"""Lines a finding's message names: the release (`rebound at line 42`), the copy (`(line 21)`)."""


def finding_lines(finding: Finding) -> frozenset[int]:
    """The lines a finding is about: its own expression and the lines its message names."""
    named = (int(number) for number in _NAMED_LINE.findall(finding.message))
    return frozenset(range(finding.line, finding.end_line + 1)).union(named)


def _access_frames(report: Mapping[str, Any], innermost: bool = False) -> frozenset[tuple[str, int]]:
    """(real path, line) of the user frames of both accesses (`innermost`: the last frame of
    each only); the free and the host access are the `current` access of their reports. The
    allocation is not an access: a race confirms a finding by what ran at its lines, not by
    where its memory came from."""
    stacks = [(report.get(side) or {}).get("stack") or () for side in ("current", "previous")]
    return frozenset(
        (real(frame["file"]), int(frame["line"])) for stack in stacks for frame in (stack[-1:] if innermost else stack)
    )


def _at(finding: Finding, path: str, lines: frozenset[int], report: Mapping[str, Any]) -> list[int]:
    """The lines of the finding one of the race's accesses is at: a frame at its own or named
    lines; for a finding on a `with` line (about the whole block), an op made in the block."""
    found = _lines_in(path, _access_frames(report), lines)
    if not found and finding.line == finding.span.start_line:
        found = _lines_in(path, _access_frames(report, innermost=True), finding.span)
    return found


def _lines_in(path: str, frames: frozenset[tuple[str, int]], lines: Iterable[int] | Span) -> list[int]:
    return sorted(line for file, line in frames if file == path and line in lines)


@cache
def _statement_starts(path: str) -> tuple[tuple[int, int], ...]:
    """(first line, last line) of every statement of the file; empty when it cannot be read."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple((node.lineno, node.end_lineno or node.lineno) for node in ast.walk(tree) if isinstance(node, ast.stmt))


def statement_line(path: str, line: int) -> int:
    """The first line of the innermost statement holding `line`: the line coverage records
    when any part of a statement written over several lines runs."""
    holding = [start for start, end in _statement_starts(path) if start <= line <= end]
    return max(holding, default=line)


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
    linted: Sequence[str] = (),
) -> tuple[list[Verdict], list[RuntimeOnly]]:
    """A verdict per finding (same order) and the races no finding explains.

    `reaching_files` maps each flagged file (real path) to the test files (real paths) that
    import it, transitively: only used to say why a finding was not reached. `linted`: the
    paths linted, inside which a runtime-only race is placed when one of its frames is.
    """
    paths = [real(finding.path) for finding in findings]
    frames = [_access_frames(race.report) for race in run.races]
    explained: set[int] = set()
    verdicts: list[Verdict] = []
    for finding, path in zip(findings, paths, strict=True):
        rule = rule_by_code(finding.code)
        if rule is None:
            verdicts.append(Verdict(finding, ERROR, f"{finding.code} is not a stream rule: nothing to run"))
            continue
        lines = finding_lines(finding)
        matched = [
            i
            for i, race in enumerate(run.races)
            if race.report.get("kind") in rule.confirmed_by and _at(finding, path, lines, race.report)
        ]
        explained.update(matched)
        if matched:
            tests = tuple(dict.fromkeys(run.races[i].nodeid for i in matched))
            verdicts.append(Verdict(finding, CONFIRMED, finding.message, tests, run.races[matched[0]].report))
            continue
        nearby = [
            i for i, found in enumerate(frames) if _lines_in(path, found, lines) or _lines_in(path, found, finding.span)
        ]
        if nearby:
            verdicts.append(_other_race(finding, path, lines, run.races, frames, nearby))
            continue
        ran_at = statement_line(path, finding.line)
        reached = [
            test
            for test in run.tests.values()
            if ran_at in test.reached.get(path, ()) or not lines.isdisjoint(test.reached.get(path, ()))
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
                Verdict(
                    finding, DISMISSED, f"line {finding.line} ran in {_tests_text(clean)}, no race touched it", tests
                )
            )
        else:
            verdicts.append(_not_reached(finding, path, run, reaching_files))
    runtime_only = _runtime_only([race for i, race in enumerate(run.races) if i not in explained], linted)
    return verdicts, runtime_only


def _other_race(
    finding: Finding,
    path: str,
    lines: frozenset[int],
    races: Sequence[Race],
    frames: Sequence[frozenset[tuple[str, int]]],
    nearby: Sequence[int],
) -> Verdict:
    """What a finding's block saw instead of its predicted race, said plainly: the race stays
    runtime-only (it is listed with its code), the finding is neither confirmed nor dismissed."""
    first = races[nearby[0]].report
    kind = str(first.get("kind"))
    at_lines = _lines_in(path, frames[nearby[0]], lines)
    where = at_lines or _lines_in(path, frames[nearby[0]], finding.span)
    place = f"at line {where[0]}" if at_lines else f"at line {where[0]} of its block, not at its lines"
    code = kinds.code_of(kind)
    more = f" (+{len(nearby) - 1} more)" if len(nearby) > 1 else ""
    tests = tuple(dict.fromkeys(races[i].nodeid for i in nearby))
    return Verdict(finding, OTHER_RACE, f"a {kind} race {place}{more}: runtime-only {code}", tests, first)


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
    reason = f"no test reached line {finding.line}"
    skipped = sum(
        1 for test in run.tests.values() if test.outcome == SKIPPED and real(nodeid_file(test.nodeid)) in importers
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


def _user_site(frames: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """The innermost frame, unless none is the user's: report stacks then hold every frame (a
    free during garbage collection), and the allocation's site says more."""
    return _site(frames) if any(is_user_file(frame["file"]) for frame in frames) else None


def race_site(report: Mapping[str, Any], linted: Sequence[str] = ()) -> tuple[str, int] | None:
    """Where a race is reported (and a `# noqa` for it is read): where it is placed
    (`placed_site`), else the racing access's innermost user frame (for a free in use, the
    free), else its allocation's."""
    current = report.get("current") or {}
    return (
        placed_site(report, linted)
        or _user_site(current.get("stack") or ())
        or _site((report.get("allocation") or {}).get("stack") or ())
    )


def race_key(report: Mapping[str, Any]) -> tuple[Any, ...]:
    """Same kind between the same two lines: one race site, one runtime-only entry, whatever the tests and
    operators (`x.mean()` and `x.std()` on one line reading one unsynced tensor is one bug)."""
    current = report.get("current") or {}
    previous = report.get("previous") or {}
    return (
        report.get("kind"),
        _site(current.get("stack") or ()),
        _site(previous.get("stack") or ()),
    )


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def placed_site(report: Mapping[str, Any], linted: Sequence[str] = ()) -> tuple[str, int] | None:
    """Where a race is listed: of the access the sanitizer placed it at (its `site`: the
    racing access, or the use a library's free broke), the innermost frame inside the linted
    paths, decorators' wrappers skipped; else the sanitizer's own site. None for a report
    without a site (an older sanitizer's)."""
    site = report.get("site") or {}
    frames = (report.get(site.get("access", "current")) or {}).get("stack") or ()
    roots = [real(path) for path in linted]
    inside = [frame for frame in frames if not frame.get("wrapper") and _within(real(frame["file"]), roots)]
    if inside:
        return inside[-1]["file"], int(inside[-1]["line"])
    return (site["file"], int(site["line"])) if site.get("file") else None


def _runtime_only(races: Sequence[Race], linted: Sequence[str] = ()) -> list[RuntimeOnly]:
    """One entry per distinct race (the same race seen by several tests is listed once)."""
    grouped: dict[tuple[Any, ...], list[Race]] = {}
    for race in races:
        grouped.setdefault(race_key(race.report), []).append(race)
    found = []
    for group in grouped.values():
        report = group[0].report
        kind = str(report.get("kind"))
        file, line = race_site(report, linted) or ("<unknown>", 0)
        found.append(
            RuntimeOnly(
                code=kinds.code_of(kind),
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
