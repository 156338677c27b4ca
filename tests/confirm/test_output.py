"""Text and JSON output of --confirm, on verdicts made by hand."""

from __future__ import annotations

import json

from csan_lint.lint.model import Finding, Span
from csan_lint.runtime.confirm_output import format_json, format_text, report_from_json
from csan_lint.runtime.confirm_verdict import (
    ALSO_UNCHECKED,
    EMULATION_GAP,
    OUTSIDE_TESTS,
    Race,
    RunResult,
    RuntimeOnly,
    StreamLeak,
    TestFailure,
    TestRun,
    Verdict,
)

REPORT = {
    "kind": "read-after-write",
    "severity": "error",
    "message": "`add` reads memory that `mul` may still be writing",
    "allocation": {"ptr": 4096, "size": 16, "stream": 0, "stack": [{"file": "src/a.py", "line": 3, "function": "f"}]},
    "current": {
        "stream": 7,
        "operator": "aten::add.Tensor",
        "argument": "self",
        "is_write": False,
        "stack": [{"file": "src/a.py", "line": 12, "function": "f"}],
    },
    "previous": {
        "stream": 0,
        "operator": "aten::mul.Tensor",
        "argument": "out",
        "is_write": True,
        "stack": [{"file": "src/a.py", "line": 10, "function": "f"}],
    },
}


def finding(line: int) -> Finding:
    return Finding("src/a.py", line, 9, "CSL101", f"finding at {line}", line, 20, Span(line, line + 2), "wait")


VERDICTS = [
    Verdict(finding(11), "confirmed", "finding at 11", ("t.py::a", "t.py::b"), REPORT),
    Verdict(finding(20), "dismissed", "block ran in 3 tests, no race", ("t.py::a", "t.py::b", "t.py::c")),
    Verdict(finding(30), "unexercised", "no test reached lines 30-32"),
    Verdict(finding(40), "error", "t.py::d crashed: the test process was killed by SIGKILL", ("t.py::d",)),
]
ONLY = [
    RuntimeOnly("CSL901", "read-after-write", "t.py", 7, "a race", ("t.py::e",), REPORT),
    RuntimeOnly(
        "CSL909", "wait-unrecorded-event", "t.py", 9, "no-op wait", ("t.py::f",), {**REPORT, "severity": "warning"}
    ),
]


def test_text_has_one_line_per_verdict_and_a_summary():
    lines = format_text(VERDICTS, ONLY).splitlines()
    assert lines == [
        "src/a.py:11:9: CSL101 confirmed  finding at 11 (t.py::a, +1 more)",
        "    help: wait",
        "src/a.py:20:9: CSL101 dismissed  block ran in 3 tests, no race (t.py::a, +2 more)",
        "src/a.py:30:9: CSL101 unexercised  no test reached lines 30-32",
        "src/a.py:40:9: CSL101 error  t.py::d crashed: the test process was killed by SIGKILL",
        "t.py:7: CSL901 runtime-only  a race (t.py::e)",
        "t.py:9: CSL909 runtime-only warning  no-op wait (t.py::f)",
        "1 confirmed, 0 other-race, 1 dismissed, 1 unexercised, 1 error; 2 runtime-only",
    ]


def test_the_table_counts_tests_race_sites_and_misses_by_kind_and_names_leaks():
    free = {**REPORT, "kind": "free-in-use"}
    warning = {**REPORT, "kind": "wait-unrecorded-event", "severity": "warning"}
    run = RunResult(
        tests={
            nodeid: TestRun(nodeid, outcome)
            for nodeid, outcome in [
                ("t.py::a", "passed"),
                ("t.py::b", "passed"),
                ("t.py::d", "crashed"),
                (OUTSIDE_TESTS, "passed"),
            ]
        },
        races=[Race("t.py::a", REPORT), Race("t.py::b", REPORT), Race("t.py::e", free), Race("t.py::f", warning)],
        leaks=[StreamLeak("t.py::a", 0, 32)],
    )
    only = [RuntimeOnly("CSL904", "free-in-use", "t.py", 7, "a free", ("t.py::e",), free), ONLY[1]]
    failures = [TestFailure("t.py::d", "crashed", "the test process was killed by SIGKILL", ALSO_UNCHECKED, "crashed")]
    lines = format_text(VERDICTS, only, run=run, seconds=3.04, failures=failures).splitlines()
    assert lines[-8:] == [
        "note: t.py::a left stream 32 current on cuda:0; the next test started on the default stream",
        "CRASHED t.py::d - the test process was killed by SIGKILL "
        "[also without the sanitizer (crashed): the test's own failure]",
        "tests   3 run: 2 passed, 1 crashed",
        "failed  1 did not pass: 1 also-without-the-sanitizer",
        "races   2 race sites: 1 free-in-use, 1 read-after-write",  # the same site in two tests is one
        "missed  1 race site no finding predicted: 1 free-in-use",  # a warning is no race
        "time    3.0 s",
        "1 confirmed, 0 other-race, 1 dismissed, 1 unexercised, 1 error; 2 runtime-only",
    ]


def test_quiet_drops_the_summary_not_the_failed_tests():
    assert "runtime-only\n" not in format_text(VERDICTS, [], quiet=True)
    assert format_text([], [], quiet=True) == ""
    gap = TestFailure("t.py::g", "failed", "the emulated device does not support X: please report it", EMULATION_GAP)
    assert format_text([], [], quiet=True, failures=[gap]) == (
        "FAILED t.py::g - the emulated device does not support X: please report it "
        "[emulation gap: not the test's failure]\n"
    )


def test_verbose_shows_the_sanitizer_report_under_confirmed_findings():
    text = format_text(VERDICTS[:2], [], verbose=True)
    lines = text.splitlines()
    assert lines[0].startswith("src/a.py:11:9: CSL101 confirmed")
    assert lines[1] == "    help: wait"
    report = lines[2 : lines.index(next(line for line in lines if "dismissed" in line))]
    assert report[0].startswith("    csan: read-after-write:")
    assert any('File "src/a.py", line 12, in f' in line for line in report)
    assert any('File "src/a.py", line 10, in f' in line for line in report)


def test_report_survives_the_round_trip_through_json():
    report = report_from_json(REPORT)
    assert (report.kind, report.current.operator, report.previous.stream) == ("read-after-write", "aten::add.Tensor", 0)
    assert report.allocation.stack[0].lineno == 3


def test_json_document():
    document = json.loads(format_json(VERDICTS, ONLY, device="emulated", test_files=["t.py"]))
    assert document["version"] == 1 and document["device"] == "emulated" and document["test_files"] == ["t.py"]
    first = document["findings"][0]
    assert (first["code"], first["line"], first["span"], first["verdict"]) == (
        "CSL101",
        11,
        {"start_line": 11, "end_line": 13},
        "confirmed",
    )
    assert first["tests"] == ["t.py::a", "t.py::b"] and first["runtime_report"] == REPORT
    assert [f["verdict"] for f in document["findings"]] == ["confirmed", "dismissed", "unexercised", "error"]
    assert document["findings"][2]["runtime_report"] is None
    assert [entry["code"] for entry in document["runtime_only"]] == ["CSL901", "CSL909"]
    assert document["summary"] == {
        "confirmed": 1,
        "other-race": 0,
        "dismissed": 1,
        "unexercised": 1,
        "error": 1,
        "runtime_only": 2,
        "tests_failed": 0,
        "not_shown": {"ignored": 0, "suppressed": 0, "baseline": 0},
    }
    assert document["failures"] == []


def test_json_lists_the_failed_tests_with_their_cause():
    tests = [TestRun("t.py::a", "failed", "ValueError: boom"), TestRun("t.py::b", "failed", "RuntimeError: x", gap="G")]
    failures = [
        TestFailure("t.py::a", "failed", "ValueError: boom", ALSO_UNCHECKED, "failed"),
        TestFailure("t.py::b", "failed", "G", EMULATION_GAP),
    ]
    document = json.loads(format_json([], [], device="emulated", test_files=["t.py"], tests=tests, failures=failures))
    assert document["tests"][1] == {"nodeid": "t.py::b", "outcome": "failed", "reason": "RuntimeError: x", "gap": "G"}
    assert document["failures"] == [
        {
            "nodeid": "t.py::a",
            "outcome": "failed",
            "reason": "ValueError: boom",
            "cause": "also-without-the-sanitizer",
            "unchecked_outcome": "failed",
        },
        {"nodeid": "t.py::b", "outcome": "failed", "reason": "G", "cause": "emulation-gap", "unchecked_outcome": None},
    ]
    assert document["summary"]["tests_failed"] == 2
