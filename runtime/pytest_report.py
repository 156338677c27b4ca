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

The session's other files are opened here too, with the same per-worker naming (`worker_path`):
`--csan-trace-out` (`trace_out`) and `--csan-facts` (`facts_out`).
"""

from __future__ import annotations

import json
import os
import re
from typing import IO, TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from csan_lint.runtime.facts_recorder import FactsRecorder
    from csan_lint.runtime.sanitizer import Sanitizer

REPORT_VERSION = 1


def worker_id(config: pytest.Config) -> str | None:
    """The pytest-xdist worker this process is (`gw0`, ...); None outside xdist's workers."""
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else None


def worker_path(config: pytest.Config, path: str, *, keep_suffix: bool = False) -> str:
    """`path` as this process writes it: `PATH.gwN` from a pytest-xdist worker (`stem.gwN.ext`
    with `keep_suffix`, for a viewer that reads files by extension), else `path`; the controller
    merges the workers' files."""
    worker = worker_id(config)
    if worker is None:
        return path
    if keep_suffix:
        stem, suffix = os.path.splitext(path)
        return f"{stem}.{worker}{suffix}"
    return f"{path}.{worker}"


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


def trace_out(config: pytest.Config) -> Any:
    """`--csan-trace-out PATH` (PATH.gwN under a pytest-xdist worker), open for writing."""
    path = config.getoption("csan_trace_out")
    if not path:
        return None
    from csan_lint.runtime.chrome import TraceOut

    path = worker_path(config, path, keep_suffix=True)
    try:
        return TraceOut(path)
    except OSError as error:
        raise pytest.UsageError(f"--csan-trace-out: cannot write {path}: {error.strerror}") from None


def facts_out(config: pytest.Config, sanitizer: Sanitizer) -> tuple[FactsRecorder | None, str | None]:
    """`--csan-facts PATH`: facts recorded from now on, for PATH (PATH.gwN from an xdist worker)."""
    path = config.getoption("csan_facts")
    if not path:
        return None, None
    from csan_lint.runtime.facts_mode import record_facts

    return record_facts(sanitizer), worker_path(config, path)
