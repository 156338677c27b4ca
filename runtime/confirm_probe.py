"""pytest plugin that `--confirm` loads into its test subprocess (`-p csan_lint.runtime.confirm_probe
--csan-confirm-probe SPEC.json`): per-test lines reached in the flagged files, deselection of
tests already run, collection errors. Inert without the option.

Records are JSON Lines appended to the spec's `out` file (`out.gwN` in a pytest-xdist worker)
and flushed one by one, so a crash loses at most the test in progress:
    {"type": "session", "rootdir": ...}
    {"type": "collected", "count": N}
    {"type": "collect-start" | "collect-end", "path": real path}        # a test file's import
    {"type": "collect-error", "path": real path, "longrepr": pytest's text}
    {"type": "reached", "nodeid": ..., "lines": {real path: [line, ...]}}
Two ways to know the lines: `coverage` (coverage.py's C tracer, one dynamic context per test,
read back when the test ends: cheap, but lost if the process dies mid-test) and `trace`
(a `sys.settrace` tracer limited to the flagged spans that writes each line as it is first
reached: slower, crash-proof; used to re-run a test that crashed or hung, alone).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any

import pytest

from csan_lint.runtime.pytest_report import is_xdist_controller, worker_id

OPTION = "--csan-confirm-probe"
UNCHECKED_CONTEXT = "<not sanitized>"
"""Coverage context of tests marked `csan(enabled=False)`: measured, never read."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("csan").addoption(
        OPTION,
        dest="csan_confirm_probe",
        metavar="SPEC",
        default=None,
        help="internal to csan-lint --confirm: JSON spec of the files to watch and where to write",
    )


def pytest_configure(config: pytest.Config) -> None:
    spec_path = config.getoption("csan_confirm_probe")
    if spec_path and not is_xdist_controller(config):  # its workers run the tests
        spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
        config.pluginmanager.register(Probe(config, spec), "csan-confirm-probe-instance")


class Probe:
    """The probe for one session: coverage (or the span tracer) on from configure to the end."""

    def __init__(self, config: pytest.Config, spec: dict[str, Any]) -> None:
        self.config = config
        self.files = [os.path.realpath(path) for path in spec["files"]]
        self.deselect = frozenset(spec.get("deselect", ()))
        worker = worker_id(config)  # each pytest-xdist worker writes a file of its own
        self.out: IO[str] = open(spec["out"] + (f".{worker}" if worker else ""), "a", encoding="utf-8")
        self.write({"type": "session", "rootdir": str(config.rootpath)})
        self.coverage: Any = None
        self.spans: dict[str, frozenset[int]] = {}
        if spec.get("mode", "coverage") == "coverage":
            import coverage

            self.coverage = coverage.Coverage(data_file=None, include=self.files, config_file=False)
            self.coverage.start()
        else:
            self.spans = {
                os.path.realpath(path): frozenset(line for start, end in spans for line in range(start, end + 1))
                for path, spans in spec["spans"].items()
            }

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.File):  # importing a test module: it may crash or hang
            self.write({"type": "collect-start", "path": os.path.realpath(collector.path)})

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        path = os.path.realpath(Path(self.config.rootpath, report.nodeid.split("::", 1)[0]))
        if report.failed:
            self.write({"type": "collect-error", "path": path, "longrepr": report.longreprtext})
        if "::" not in report.nodeid:
            self.write({"type": "collect-end", "path": path})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        dropped = [item for item in items if item.nodeid in self.deselect]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item.nodeid not in self.deselect]
        self.write({"type": "collected", "count": len(items)})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Lines run while importing the test modules (module-level code of flagged modules):
        under the sanitizer too, so they count, as "outside any test" (node id "")."""
        if self.coverage is not None:
            lines = self._covered("")
            if lines:
                self.write({"type": "reached", "nodeid": "", "lines": lines})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        marker = item.get_closest_marker("csan")
        if marker is not None and not marker.kwargs.get("enabled", True):
            # Opted out of the sanitizer: what it runs is not checked, so it dismisses nothing.
            if self.coverage is not None:
                self.coverage.switch_context(UNCHECKED_CONTEXT)
            try:
                return (yield)
            finally:
                if self.coverage is not None:
                    self.coverage.switch_context("")
        if self.coverage is not None:
            self.coverage.switch_context(item.nodeid)
            try:
                return (yield)
            finally:
                self.coverage.switch_context("")
                self.write({"type": "reached", "nodeid": item.nodeid, "lines": self._covered(item.nodeid)})
        tracer = _SpanTracer(self, item.nodeid)
        sys.settrace(tracer.on_call)
        threading.settrace(tracer.on_call)
        try:
            return (yield)
        finally:
            sys.settrace(None)
            threading.settrace(None)

    def _covered(self, nodeid: str) -> dict[str, list[int]]:
        data = self.coverage.get_data()
        data.set_query_contexts([f"^{re.escape(nodeid)}$"])
        lines = {}
        for path in data.measured_files():
            found = data.lines(path)
            if found:
                lines[os.path.realpath(path)] = sorted(found)
        return lines

    def pytest_unconfigure(self) -> None:
        if self.coverage is not None:
            self.coverage.stop()
        self.out.close()


class _SpanTracer:
    """Writes each flagged line the first time a test reaches it; cheap on every other frame
    (one dict lookup per call, no local tracing outside the flagged files)."""

    def __init__(self, probe: Probe, nodeid: str) -> None:
        self.probe = probe
        self.nodeid = nodeid
        self.seen: set[tuple[str, int]] = set()
        self.files: dict[str, str | None] = {}

    def on_call(self, frame: FrameType, event: str, arg: object) -> Any:
        filename = frame.f_code.co_filename
        path = self.files.get(filename, "")
        if path == "":
            real = os.path.realpath(filename)
            path = self.files[filename] = real if real in self.probe.spans else None
        return self.on_line if path is not None else None

    def on_line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            path = self.files[frame.f_code.co_filename] or ""
            key = (path, frame.f_lineno)
            if frame.f_lineno in self.probe.spans[path] and key not in self.seen:
                self.seen.add(key)
                self.probe.write({"type": "reached", "nodeid": self.nodeid, "lines": {path: [frame.f_lineno]}})
        return self.on_line
