"""`--confirm --format junit`: one test case per finding and per unexplained race; the report's
failures are exactly what makes the exit status 1."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.shell.cli import main
from csan_lint.runtime.confirm_output import format_junit
from csan_lint.runtime.confirm_verdict import ALSO_UNCHECKED, EMULATION_GAP, RuntimeOnly, TestFailure, Verdict

FIXTURE = Path(__file__).parents[1] / "confirm" / "fixture_project"
REPORT = {
    "kind": "read-after-write",
    "severity": "error",
    "message": "`add` reads memory that `mul` may still be writing",
    "allocation": None,
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


def _finding(line: int) -> Finding:
    return Finding("src/pkg/a.py", line, 9, "CSL101", f"finding at {line}", line, 20, Span(line, line + 2))


VERDICTS = [
    Verdict(_finding(11), "confirmed", "finding at 11", ("t.py::a",), REPORT),
    Verdict(_finding(20), "dismissed", "block ran in 1 test, no race", ("t.py::b",)),
    Verdict(_finding(30), "unexercised", "no test reached lines 30-32"),
    Verdict(_finding(40), "error", "t.py::d crashed", ("t.py::d",)),
]
ONLY = [
    RuntimeOnly("CSL901", "read-after-write", "t.py", 7, "a race", ("t.py::e",), REPORT),
    RuntimeOnly(
        "CSL909", "wait-unrecorded-event", "t.py", 9, "a warning", ("t.py::f",), {**REPORT, "severity": "warning"}
    ),
]


def _outcome(case: ET.Element) -> str:
    children = [child.tag for child in case if child.tag != "system-out"]
    return children[0] if children else "passed"


def _counts(element: ET.Element) -> dict[str, int]:
    return {key: int(element.get(key, "-1")) for key in ("tests", "failures", "errors", "skipped")}


def test_one_case_per_verdict_with_the_matching_outcome() -> None:
    root = ET.fromstring(format_junit(VERDICTS, ONLY, device="emulated"))
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [_outcome(case) for case in cases] == ["failure", "passed", "skipped", "error", "failure", "passed"]
    assert _counts(root) == _counts(suite) == {"tests": 6, "failures": 2, "errors": 1, "skipped": 1}
    assert suite.find("properties/property").attrib == {"name": "device", "value": "emulated"}
    first = cases[0]
    assert first.attrib == {
        "classname": "src.pkg.a",
        "name": "CSL101 missing-wait-stream at src/pkg/a.py:11:9",
        "file": "src/pkg/a.py",
        "line": "11",
    }
    failure = first.find("failure")
    assert failure.get("type") == "confirmed" and failure.get("message") == "confirmed: finding at 11"
    assert "test: t.py::a" in failure.text and 'File "src/a.py", line 12, in f' in failure.text
    assert cases[1].find("system-out").text.startswith("block ran in 1 test, no race\ntest: t.py::b")
    assert cases[4].get("name") == "CSL901 runtime-only at t.py:7"


def test_fail_on_turns_unexercised_and_dismissed_into_failures() -> None:
    root = ET.fromstring(format_junit(VERDICTS, [], fail_on=frozenset({"confirmed", "unexercised", "dismissed"})))
    cases = root.findall("testsuite/testcase")
    assert [_outcome(case) for case in cases] == ["failure", "failure", "failure", "error"]
    assert [case.find("failure").get("type") for case in cases[:3]] == ["confirmed", "dismissed", "unexercised"]
    assert _counts(root) == {"tests": 4, "failures": 3, "errors": 1, "skipped": 0}


def test_empty_report_and_characters_xml_cannot_hold() -> None:
    assert _counts(ET.fromstring(format_junit([], []))) == {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    bad = Verdict(_finding(50), "error", "test printed \x1b[31mred\x00 & <done>", ())
    case = ET.fromstring(format_junit([bad], [])).find("testsuite/testcase")
    assert case.find("error").get("message") == "error: test printed \ufffd[31mred\ufffd & <done>"


def test_failed_tests_are_failures_and_emulation_gaps_errors() -> None:
    failures = [
        TestFailure("tests/test_a.py::test_x", "failed", "ValueError: boom", ALSO_UNCHECKED, "failed"),
        TestFailure("tests/test_a.py::test_y", "failed", "the emulated device does not support X", EMULATION_GAP),
    ]
    root = ET.fromstring(format_junit([], [], failures=failures))
    cases = root.findall("testsuite/testcase")
    assert [(case.get("classname"), case.get("name"), _outcome(case)) for case in cases] == [
        ("tests.test_a", "tests/test_a.py::test_x", "failure"),
        ("tests.test_a", "tests/test_a.py::test_y", "error"),
    ]
    assert cases[0].find("failure").get("message") == (
        "failed: ValueError: boom [also without the sanitizer (failed): the test's own failure]"
    )
    assert cases[1].find("error").get("type") == "emulation-gap"
    assert _counts(root) == {"tests": 2, "failures": 1, "errors": 1, "skipped": 0}


def test_static_formats_are_refused_with_confirm_and_junit_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for arguments in (["--confirm", "--format", "github"], ["--format", "junit"]):
        result = CliRunner().invoke(main, arguments)
        assert result.exit_code == 2 and "error: --format" in result.stderr, arguments


@pytest.mark.slow
def test_cli_junit_report_of_a_real_confirm_run(tmp_path: Path, run_confirm) -> None:
    """The fixture project on the emulated device: every verdict kind and a runtime-only race."""
    pytest.importorskip("torch")
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    done = run_confirm(tmp_path, "--timeout", "30", output="junit")
    assert done.returncode == 1, done.stderr
    root = ET.fromstring(done.stdout)
    outcomes = {case.get("classname"): _outcome(case) for case in root.iter("testcase")}
    assert outcomes == {
        "app.racy": "failure",
        "app.safe": "passed",
        "app.legacy": "skipped",
        "app.crashy": "error",
        "tests.test_racy": "failure",
        "tests.test_crashy": "failure",  # it crashes without the sanitizer too
    }
    assert _counts(root) == {"tests": 6, "failures": 3, "errors": 1, "skipped": 1}
    assert root.find("testsuite/properties/property").get("value") == "emulated"
