"""The `pytest --csan` plugin's `--csan-report PATH`: JSON Lines, flushed line by line so that a
crash loses nothing (under pytest-xdist each worker streams its own `PATH.gwN`, and the
controller appends them whole to PATH when the session ends, so one worker's lines never
interleave with another's):
    {"type": "session", "version": 1, "device": "emulated" | "cuda"[, "worker": "gw0" under xdist]}
    {"type": "test-start", "nodeid": ...}
    {"type": "race", "nodeid": ..., "report": <report JSON>[ with "child": {"pid", "argv"}]}
    {"type": "internal-error", "nodeid": ..., "message": ...}
    {"type": "test-end", "nodeid": ..., "outcome": "passed" | "failed" | "skipped" | "error", "longrepr": ...,
     "reason": "<exception type>: <its message's first line>" | null, "gap": <emulation gap> | null}
    {"type": "stream-leak", "nodeid": ..., "device": N, "stream": handle}
A race with `child` happened in a child process of the test (child_races.py).
"""

from __future__ import annotations

import json
import os
import re
from typing import IO, Any

import pytest

REPORT_VERSION = 1


def worker_id(config: pytest.Config) -> str | None:
    """The pytest-xdist worker this process is (`gw0`, ...); None outside xdist's workers."""
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else None


def is_xdist_controller(config: pytest.Config) -> bool:
    """The process that hands tests to pytest-xdist workers and runs none itself."""
    return worker_id(config) is None and getattr(config.option, "dist", "no") != "no"


def report_parts(path: str) -> list[str]:
    """The workers' parts of a report, `PATH.gw0`, `PATH.gw1`, ... in worker order."""
    directory, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(name) + r"\.gw(\d+)$")
    found = [(int(match[1]), entry) for entry in os.listdir(directory) if (match := pattern.match(entry))]
    return [os.path.join(directory, entry) for _, entry in sorted(found)]


class ReportMerger:
    """On the pytest-xdist controller: PATH gets each worker's part, whole, once all are done."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            open(path, "w", encoding="utf-8").close()
            for stale in report_parts(path):  # an earlier run's, with more workers
                os.remove(stale)
        except OSError as error:
            raise pytest.UsageError(f"--csan-report: cannot write {path}: {error.strerror}") from None

    def pytest_unconfigure(self) -> None:
        with open(self.path, "ab") as merged:
            for part in report_parts(self.path):
                with open(part, "rb") as lines:
                    merged.write(lines.read())
                os.remove(part)


class ReportFile:
    """JSON Lines, flushed after each line."""

    def __init__(self, path: str) -> None:
        self.file: IO[str] = open(path, "w", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
