"""A pytest plugin the harness loads (`-p realsuite_outcomes`): one JSON line per test to the file
named by REALSUITE_OUTCOMES, written as each test ends, so a run killed by its time limit still
says which tests finished and how."""

from __future__ import annotations

import json
import os

import pytest

_RESULTS: dict[str, dict[str, object]] = {}


def _write(line: dict[str, object]) -> None:
    path = os.environ.get("REALSUITE_OUTCOMES")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def _last_error_line(report: pytest.TestReport) -> str:
    """The exception's own line (`E   ...` in pytest's text), else the text's last line."""
    text = report.longreprtext or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    firsts = [line for line in errors if line]
    if firsts:
        return firsts[0][:300]
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _RESULTS.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "seconds": 0.0})
    entry["seconds"] = float(entry["seconds"]) + report.duration  # type: ignore[arg-type]
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry.setdefault("message", _last_error_line(report))
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
    if report.when == "teardown":
        _write(_RESULTS.pop(report.nodeid))
