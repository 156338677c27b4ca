"""`--confirm --format sarif`: the verdicts and the runtime-only races as one SARIF 2.1.0 run that
the official schema accepts, with the runtime codes as rules, a race's accesses and its streams'
creation sites as related locations, and the tests that did not pass as notifications."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from csan_lint.lint.model import Finding, Span
from csan_lint.runtime.confirm_sarif import SITE_KEY, confirm_sarif_log
from csan_lint.runtime.confirm_verdict import EMULATION_GAP, RuntimeOnly, TestFailure, Verdict
from csan_lint.runtime.kinds import RUNTIME_CODES, UNKNOWN_KIND_CODE

REPO = Path(__file__).resolve().parents[2]
SIDE = "stream created at a.py:5 (self.side)"
REPORT = {
    "kind": "read-after-write",
    "severity": "error",
    "message": f"`aten::add.Tensor` at src/a.py:12 on {SIDE} reads memory that `aten::mul.Tensor` at src/a.py:10 "
    "on the default stream may still be writing",
    "allocation": None,
    "current": {
        "stream": 7,
        "stream_name": SIDE,
        "stream_created": {"file": "src/a.py", "line": 5, "function": "__init__", "name": "self.side"},
        "operator": "aten::add.Tensor",
        "argument": "self",
        "is_write": False,
        "stack": [{"file": "t.py", "line": 3, "function": "test_e"}, {"file": "src/a.py", "line": 12, "function": "f"}],
    },
    "previous": {
        "stream": 0,
        "stream_name": "the default stream",
        "stream_created": None,
        "operator": "aten::mul.Tensor",
        "argument": "out",
        "is_write": True,
        "stack": [{"file": "src/a.py", "line": 10, "function": "f"}],
    },
}
VERDICTS = [
    Verdict(
        Finding("src/a.py", 12, 9, "CSL101", "x is read unjoined", 12, 20, Span(11, 13)),
        "confirmed",
        "x is read unjoined",
        ("t.py::a",),
        REPORT,
        "CSL101|src/a.py|f|y = x + 1",
    ),
    Verdict(
        Finding("src/a.py", 20, 9, "CSL101", "y is read unjoined", 20, 20, Span(20, 21)),
        "dismissed",
        "block ran in 1 test, no race",
        ("t.py::b",),
    ),
    Verdict(
        Finding("src/a.py", 30, 9, "CSL201", "z is freed in use", 30, 20, Span(30, 30)),
        "unexercised",
        "no test reached lines 30-30",
    ),
    Verdict(
        Finding("src/a.py", 40, 9, "CSL102", "w is read unjoined", 40, 20, Span(40, 41)),
        "error",
        "t.py::d crashed",
        ("t.py::d",),
    ),
]
ONLY = [
    RuntimeOnly("CSL901", "read-after-write", "src/a.py", 12, REPORT["message"], ("t.py::e",), REPORT, "CSL901|k"),
    RuntimeOnly(
        "CSL909",
        "wait-unrecorded-event",
        "src/b.py",
        9,
        "a wait orders nothing",
        ("t.py::f",),
        {**REPORT, "severity": "warning"},
    ),
]


def _log(**options: Any) -> dict[str, Any]:
    return confirm_sarif_log(VERDICTS, ONLY, device="emulated", test_files=["t.py"], **options)


def _region(location: dict[str, Any]) -> tuple[str, int]:
    physical = location["physicalLocation"]
    return physical["artifactLocation"]["uri"], physical["region"]["startLine"]


def test_the_log_is_valid_sarif_with_the_runtime_codes_as_rules(validator: jsonschema.protocols.Validator) -> None:
    log = _log()
    validator.validate(log)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    runtime = {rule["id"]: rule for rule in rules if rule["id"].startswith("CSL9")}
    assert list(runtime) == [entry.code for entry in RUNTIME_CODES] + [UNKNOWN_KIND_CODE]
    for entry in RUNTIME_CODES:
        assert runtime[entry.code]["name"] == entry.name
        assert runtime[entry.code]["shortDescription"]["text"] == entry.summary
    assert runtime["CSL909"]["defaultConfiguration"]["level"] == "warning"
    assert runtime["CSL901"]["defaultConfiguration"]["level"] == "error"
    assert {"CSL101", "CSL201", "CSL001"} <= {rule["id"] for rule in rules}  # the static catalog too
    for result in log["runs"][0]["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_each_finding_carries_its_verdict() -> None:
    results = _log()["runs"][0]["results"][: len(VERDICTS)]
    assert [(r["ruleId"], r["kind"], r["level"], r["properties"]["verdict"]) for r in results] == [
        ("CSL101", "fail", "error", "confirmed"),
        ("CSL101", "pass", "none", "dismissed"),
        ("CSL201", "open", "none", "unexercised"),
        ("CSL102", "review", "none", "error"),
    ]
    assert results[0]["message"]["text"] == "x is read unjoined [confirmed]"
    assert results[1]["message"]["text"] == "y is read unjoined [dismissed: block ran in 1 test, no race]"
    assert results[1]["properties"]["tests"] == ["t.py::b"]
    assert _region(results[1]["locations"][0]) == ("src/a.py", 20)
    assert results[0]["partialFingerprints"] == {SITE_KEY: "CSL101|src/a.py|f|y = x + 1"}
    unexercised = _log(fail_on=frozenset({"confirmed", "unexercised"}))["runs"][0]["results"][2]
    assert (unexercised["kind"], unexercised["level"]) == ("fail", "error")  # --fail-on unexercised


def test_a_confirmed_finding_shows_the_race_it_was_confirmed_by() -> None:
    confirmed = _log()["runs"][0]["results"][0]
    related = [(r["id"], r["message"]["text"], _region(r)) for r in confirmed["relatedLocations"]]
    assert related == [
        (1, "the statements the finding is about (its span)", ("src/a.py", 11)),
        (2, f"the racing access: `aten::add.Tensor` reads on {SIDE}", ("src/a.py", 12)),
        (3, "the access it races with: `aten::mul.Tensor` writes on the default stream", ("src/a.py", 10)),
        (4, SIDE, ("src/a.py", 5)),
    ]
    stacks = confirmed["stacks"]
    assert [stack["message"]["text"] for stack in stacks] == ["the racing access", "the access it races with"]
    frames = [_region(frame["location"]) for frame in stacks[0]["frames"]]
    assert frames == [("src/a.py", 12), ("t.py", 3)]  # innermost first


def test_a_runtime_only_race_is_a_result_of_its_runtime_code_at_both_accesses() -> None:
    race, warning = _log()["runs"][0]["results"][len(VERDICTS) :]
    assert (race["ruleId"], race["kind"], race["level"]) == ("CSL901", "fail", "error")
    assert race["message"]["text"] == REPORT["message"]
    assert SIDE in race["message"]["text"]
    assert _region(race["locations"][0]) == ("src/a.py", 12)
    assert [_region(r) for r in race["relatedLocations"]] == [("src/a.py", 12), ("src/a.py", 10), ("src/a.py", 5)]
    assert race["properties"]["tests"] == ["t.py::e"] and race["partialFingerprints"] == {SITE_KEY: "CSL901|k"}
    assert (warning["ruleId"], warning["level"]) == ("CSL909", "warning")


def test_failed_tests_are_notifications_and_a_gap_fails_the_invocation(
    validator: jsonschema.protocols.Validator,
) -> None:
    failure = TestFailure("t.py::g", "failed", "RuntimeError: no pinned memory", EMULATION_GAP, "passed")
    log = _log(failures=[failure])
    validator.validate(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["message"]["text"].startswith("FAILED t.py::g - RuntimeError: no pinned memory [")
    assert note["properties"]["cause"] == EMULATION_GAP
    assert log["runs"][0]["properties"]["summary"]["tests_failed"] == 1
    assert _log()["runs"][0]["invocations"][0]["executionSuccessful"] is True


@pytest.mark.slow
def test_a_racy_example_on_the_emulated_device(tmp_path: Path, validator: jsonschema.protocols.Validator) -> None:
    """End to end: examples/prefetch_buggy.py's test on the emulated device gives its confirmed
    finding and the free-in-use no finding predicts (CSL904), each at both of the race's accesses,
    its stream named where it was created."""
    pytest.importorskip("torch")
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    command = [sys.executable, "-m", "csan_lint", "examples/prefetch_buggy.py", "--confirm", "--device", "emulated"]
    command += ["--tests", "examples/tests/test_prefetch.py", "--format", "sarif"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    log = json.loads(done.stdout)
    validator.validate(log)
    results = {result["ruleId"]: result for result in log["runs"][0]["results"]}
    assert set(results) == {"CSL102", "CSL904"}
    assert results["CSL102"]["properties"]["verdict"] == "confirmed"
    created = "stream created at prefetch_buggy.py:23 (self.copy_stream)"
    for result in results.values():
        related = {r["message"]["text"]: _region(r) for r in result["relatedLocations"]}
        assert related[created] == ("examples/prefetch_buggy.py", 23)
    race = results["CSL904"]
    assert (race["kind"], race["level"]) == ("fail", "error") and created in race["message"]["text"]
    accesses = [r["message"]["text"] for r in race["relatedLocations"]]
    assert accesses[:2] == [
        f"the free, on {created}",
        "the access it races with: `aten::addmm` reads on the default stream",
    ]
    assert [_region(r) for r in race["relatedLocations"][:2]] == [
        ("examples/prefetch_buggy.py", 31),
        ("examples/prefetch_buggy.py", 32),
    ]
