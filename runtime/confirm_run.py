"""Runs the selected tests under the sanitizer in a pytest subprocess and collects what happened.

The subprocess streams two JSON Lines files: the sanitizer plugin's `--csan-report` (tests
started and ended, races) and the probe's (lines reached per test); under pytest-xdist
(`workers`) each worker streams its own pair (`.gwN`). This side tails them all, so
a test that crashes the interpreter or hangs past the per-test timeout costs only itself: the
process is killed, the tests not run yet are run again in a new process with the broken one
and those already done deselected, and the broken one is re-run alone with a crash-proof
line tracer to learn which flagged lines it reached before it broke. A test file whose import
kills the process (or hangs) is ignored in the next process and reported as not collected.
A test whose xdist worker died is treated as crashed the same way (xdist runs the rest).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from csan_lint.lint.model import Span
from csan_lint.lint.shell.files import display_path
from csan_lint.runtime.confirm_verdict import (
    CRASHED,
    FAILED,
    INTERNAL_ERROR,
    OUTSIDE_TESTS,
    PASSED,
    SETUP_ERROR,
    SKIPPED,
    TIMED_OUT,
    Race,
    RunResult,
    StreamLeak,
    TestRun,
)
from csan_lint.runtime.warm_python import WarmPython

POLL_SECONDS = 0.05
COLLECTION_TIMEOUT_FLOOR = 120.0
"""Importing a test file (torch, the user's modules) gets 4 test timeouts, and at least this."""

Progress = Callable[[int, int], None]
"""(tests finished, tests collected) after each test."""


class RunError(Exception):
    """pytest itself could not run (usage error, internal error): no verdict is possible."""


@dataclass(frozen=True)
class RunSettings:
    device: str
    timeout: float
    workdir: Path
    workers: int = 0
    """pytest-xdist worker processes; 0: one process, no xdist."""
    keyword: str | None = None
    """pytest's `-k` expression: only the tests it matches run."""
    trace_out: str | None = None
    """`--csan-trace-out` of the first pytest process (FILE-N.ext for the Nth, after a crash)."""
    devices: int | None = None
    """`--csan-devices`: the emulated machine's device count (None: the plugin's default)."""
    python: str = sys.executable
    warm: WarmPython | None = None
    """An interpreter started early (torch imported) for the first pytest process."""
    facts: bool = False
    """Each sanitized process saves its facts from runs (facts-N.json in `workdir`)."""


def short_reason(longrepr: str | None) -> str | None:
    """One line out of pytest's failure text: the first `E ` line (the exception and its
    message), else the last line."""
    if not longrepr:
        return None
    lines = [line for line in longrepr.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    text = errors[0] if errors else lines[-1].strip() if lines else ""
    return text[:200] or None


class _Tail:
    """Reads the complete lines appended to a file since the last call."""

    def __init__(self, path: Path, worker: str = "") -> None:
        self.path = path
        self.worker = worker
        """The xdist worker writing the file (its suffix, `gw0`); "" without xdist."""
        self.offset = 0
        self.partial = b""

    def records(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as stream:
                stream.seek(self.offset)
                chunk = stream.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        found = []
        for line in lines:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a kill mid-write: the rest still counts
        return found


@dataclass
class _Pass:
    """What one pytest process reported."""

    rootdir: str | None = None
    device: str | None = None
    collected: int | None = None
    started: dict[str, float] = field(default_factory=dict)
    ended: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    gaps: dict[str, str] = field(default_factory=dict)
    """Node id -> the emulated device's gap the test failed on."""
    reached: dict[str, dict[str, set[int]]] = field(default_factory=dict)
    races: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    internal: dict[str, str] = field(default_factory=dict)
    leaks: list[tuple[str, int, int]] = field(default_factory=list)
    """(node id, device, stream) of each stream a test left current."""
    broken_files: dict[str, str] = field(default_factory=dict)
    collecting: dict[tuple[str, str], float] = field(default_factory=dict)
    """Test files being imported ((worker, real path) -> when it began); removed when collected."""
    interrupted: list[tuple[str, str, str]] = field(default_factory=list)
    """(node id, outcome, reason) of each test in progress when its process died or was killed."""
    interrupted_file: tuple[str, str] | None = None
    """(real path, reason) of the test file being imported when the process died or hung."""
    returncode: int | None = None

    def take(self, record: dict[str, Any], now: float, worker: str = "") -> None:
        kind = record.get("type")
        nodeid = record.get("nodeid") or ""  # "": outside any test (collection, session end)
        if kind == "session":
            self.rootdir = record.get("rootdir", self.rootdir)
            self.device = record.get("device", self.device)
        elif kind == "collected":
            self.collected = int(record["count"])
        elif kind == "collect-start":
            self.collecting[worker, record["path"]] = now
        elif kind == "collect-end":
            self.collecting.pop((worker, record["path"]), None)
        elif kind == "collect-error":
            self.broken_files[record["path"]] = short_reason(record.get("longrepr")) or "collection failed"
        elif kind == "reached":
            lines = self.reached.setdefault(nodeid, {})
            for path, found in record["lines"].items():
                lines.setdefault(path, set()).update(found)
        elif kind == "test-start":
            self.started[nodeid] = now
        elif kind == "test-end":
            reason = record.get("reason") or short_reason(record.get("longrepr"))
            self.ended[nodeid] = (record.get("outcome", FAILED), reason)
            if record.get("gap"):
                self.gaps[nodeid] = str(record["gap"])
        elif kind == "race":
            self.races.append((nodeid, record["report"]))
        elif kind == "internal-error":
            self.internal.setdefault(nodeid, str(record.get("message", "")))
        elif kind == "stream-leak":
            self.leaks.append((nodeid, int(record["device"]), int(record["stream"])))

    def importing(self) -> tuple[str, float] | None:
        """The test file imported for the longest time now, and since when."""
        found = min(self.collecting.items(), key=lambda item: item[1], default=None)
        return None if found is None else (found[0][1], found[1])

    def in_progress(self) -> list[str]:
        """The tests started and not ended (one per xdist worker at most), oldest first."""
        return [nodeid for nodeid in self.started if nodeid not in self.ended]


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"the test process was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"the test process was killed by signal {-returncode}"
    return f"the test process exited with code {returncode}"


class Runner:
    """Runs tests in as many pytest processes as crashes and hangs require, and reports the
    progress as tests end."""

    def __init__(self, settings: RunSettings, progress: Progress | None = None) -> None:
        self.settings = settings
        self.progress = progress
        self.passes = 0
        self.done = 0
        self.total: int | None = None
        self.device: str | None = None
        """The device the sanitizer ran on ("cuda" or "emulated"), from its report."""
        self.counting = True
        """Off while re-running a broken test alone: it was counted already."""

    def _tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, max(self.total or 0, self.done))

    def _pytest(
        self, targets: Sequence[str], probe: dict[str, Any] | None, ignore: Sequence[str] = (), workers: int = 0
    ) -> _Pass:
        """One pytest process over `targets`; `probe` None: the sanitizer off and no line probe
        (the failed tests' run without the sanitizer, by node id: no `-k`)."""
        self.passes += 1
        workdir = self.settings.workdir
        report = workdir / f"report-{self.passes}.jsonl"
        probe_out = workdir / f"probe-{self.passes}.jsonl"
        spec = workdir / f"probe-{self.passes}.json"
        plugins = []
        if probe is not None:
            spec.write_text(json.dumps({**probe, "out": str(probe_out)}), encoding="utf-8")
            plugins += ["-p", "csan_lint.runtime.confirm_probe", f"--csan-confirm-probe={spec}"]
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # the entry point is not loaded then
            plugins += ["-p", "csan_lint.runtime.pytest_plugin"]
            plugins += ["-p", "xdist.plugin"] if workers else []
        command = [
            self.settings.python, "-m", "pytest", *targets, *plugins, *_overrides(workers),
            "--csan" if probe is not None else "--csan-unchecked",
            f"--csan-device={self.settings.device}", "--csan-report-only",
            *((f"--csan-devices={self.settings.devices}",) if self.settings.devices else ()),
            f"--csan-report={report}", "--csan-report-parts",
            "--continue-on-collection-errors", "-p", "no:cacheprovider", "-q",
            *(f"--ignore={path}" for path in ignore),  # for files found under directory targets
            *(("-k", self.settings.keyword) if self.settings.keyword and probe is not None else ()),
            *((f"--csan-trace-out={self._trace_out()}",) if self.settings.trace_out and probe is not None else ()),
            *((f"--csan-facts={workdir / f'facts-{self.passes}.json'}",) if self.settings.facts and probe else ()),
        ]  # fmt: skip
        log_path = workdir / f"pytest-{self.passes}.log"
        result = _Pass()
        tails = _Tails(workdir, (probe_out.name, report.name))
        with open(log_path, "wb") as log, _terminated_as_exit():
            warm = self.settings.warm
            process = warm.run(command, log_path) if warm is not None and warm.runs(command) else None
            if process is None:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                self._watch(process, tails, result)
            finally:
                if process.poll() is None:
                    _kill(process)
        result.returncode = process.returncode
        self._drain(tails, result)
        self.device = self.device or result.device
        running = result.in_progress()
        if running and not result.interrupted:
            if workers and process.returncode in (0, 1):  # xdist replaced the dead worker
                reason = "its pytest-xdist worker died"
            else:
                reason = _describe_exit(process.returncode)
            result.interrupted = [(nodeid, CRASHED, reason) for nodeid in running]
        importing = result.importing()  # pytest always reports a file it began, unless it died
        if importing is not None and result.interrupted_file is None:
            result.interrupted_file = (importing[0], f"{_describe_exit(process.returncode)} while importing it")
        if not result.interrupted and result.interrupted_file is None and process.returncode not in (0, 1, 5):
            raise RunError(f"pytest exited with code {process.returncode}:\n{_log_tail(log_path)}")
        return result

    def _drain(self, tails: _Tails, result: _Pass) -> int:
        """Takes the new records of every file; returns how many there were."""
        now = time.monotonic()
        count = 0
        for tail in tails.all():
            records = tail.records()
            count += len(records)
            for record in records:
                before = len(result.ended)
                result.take(record, now, tail.worker)
                if record.get("type") == "collected" and self.total is None:
                    self.total = result.collected
                if len(result.ended) > before and self.counting:
                    self._tick()
        return count

    def _trace_out(self) -> str:
        """The trace file of this pass: FILE for the first, FILE-N.ext for the Nth."""
        path = self.settings.trace_out or ""
        if self.passes == 1:
            return path
        stem, suffix = os.path.splitext(path)
        return f"{stem}-{self.passes}{suffix}"

    def _watch(self, process: subprocess.Popen[bytes], tails: _Tails, result: _Pass) -> None:
        timeout = self.settings.timeout
        idle_since = time.monotonic()
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            now = time.monotonic()
            if self._drain(tails, result):
                idle_since = now
            running, importing = result.in_progress(), result.importing()
            slow = max(4 * timeout, COLLECTION_TIMEOUT_FLOOR)
            late = [nodeid for nodeid in running if now - result.started[nodeid] > timeout]
            if late:
                _kill(process)
                result.interrupted = [(nodeid, TIMED_OUT, f"no result after {timeout:g} s") for nodeid in late]
            elif not running and importing is not None and now - importing[1] > slow:
                _kill(process)
                result.interrupted_file = (importing[0], f"importing it took more than {slow:g} s")
            elif not running and importing is None and now - idle_since > slow:
                _kill(process)
                raise RunError(f"pytest made no progress for {slow:g} s outside any test")

    def run(self, test_files: Sequence[str], spans: Mapping[str, Sequence[Span]]) -> RunResult:
        """All the tests in `test_files`, however many processes it takes."""
        files = sorted(spans)
        tests: dict[str, TestRun] = {}
        races: list[Race] = []
        broken_files: dict[str, str] = {}
        finished: set[str] = set()
        ignored: list[str] = []
        leaks: list[StreamLeak] = []
        while True:
            current = self._pytest(
                test_files,
                {"mode": "coverage", "files": files, "deselect": sorted(finished)},
                ignored,
                self.settings.workers,
            )
            self._merge(current, tests, races, broken_files)
            leaks.extend(
                StreamLeak(self._display(current, nodeid), device, stream) for nodeid, device, stream in current.leaks
            )
            finished.update(current.ended)
            if current.interrupted_file is not None:
                path, reason = current.interrupted_file
                if path in ignored:  # pytest did not drop it: stop rather than loop
                    raise RunError(f"{display_path(Path(path))}: {reason}, and it could not be left out")
                broken_files[path] = reason
                ignored.append(path)
                test_files = [target for target in test_files if os.path.realpath(target.split("::")[0]) != path]
                if not test_files:
                    break
                continue
            if not current.interrupted:
                break
            for nodeid, outcome, reason in current.interrupted:
                if nodeid in finished:  # it was deselected, yet ran again: stop rather than loop
                    raise RunError(f"{nodeid}: {reason}, and it could not be deselected")
                finished.add(nodeid)
                self._tick()
                tests[self._display(current, nodeid)] = self._rerun_alone(
                    current, nodeid, outcome, reason, spans, races
                )
            if self.settings.workers and current.returncode in (0, 1):
                break  # xdist ran the rest of the tests on a new worker: nothing is left
        return RunResult(tests=tests, races=races, broken_files=broken_files, leaks=leaks)

    def unchecked(self, nodeids: Sequence[str]) -> dict[str, TestRun]:
        """The tests again, without the sanitizer (on the same device): did they fail on their own?
        A crash or a hang ends its test only; the rest run in a new process. Node id -> outcome."""
        found: dict[str, TestRun] = {}
        pending = list(nodeids)
        self.counting = False
        try:
            while pending:
                current = self._pytest(pending, None)
                for nodeid, (outcome, reason) in current.ended.items():
                    display = self._display(current, nodeid)
                    found[display] = TestRun(display, outcome, reason, gap=current.gaps.get(nodeid))
                for nodeid, outcome, reason in current.interrupted:
                    display = self._display(current, nodeid)
                    found[display] = TestRun(display, outcome, reason)
                left = [nodeid for nodeid in pending if nodeid not in found]
                if not current.interrupted or len(left) == len(pending):
                    break
                pending = left
        except RunError:
            pass  # what ran is known; the rest reads "not re-run"
        finally:
            self.counting = True
        return found

    def _rerun_alone(
        self,
        failed: _Pass,
        nodeid: str,
        outcome: str,
        reason: str,
        spans: Mapping[str, Sequence[Span]],
        races: list[Race],
    ) -> TestRun:
        """A crashed or hung test again, alone, traced line by line: what it reached before it
        broke (and any race it hit on the way) survives the second crash."""
        display = self._display(failed, nodeid)
        probe = {
            "mode": "trace",
            "files": sorted(spans),
            "spans": {path: [(s.start_line, s.end_line) for s in found] for path, found in spans.items()},
        }
        self.counting = False
        try:
            again = self._pytest([display], probe)
        except RunError:
            return TestRun(display, outcome, reason)
        finally:
            self.counting = True
        races.extend(Race(display, report) for _, report in again.races)
        return TestRun(display, outcome, reason, _frozen(again.reached.get(nodeid, {})))

    def _merge(
        self,
        current: _Pass,
        tests: dict[str, TestRun],
        races: list[Race],
        broken_files: dict[str, str],
    ) -> None:
        broken_files.update(current.broken_files)
        races.extend(Race(self._display(current, nodeid), report) for nodeid, report in current.races)
        for nodeid, (outcome, reason) in current.ended.items():
            if nodeid in current.internal:
                outcome, reason = INTERNAL_ERROR, f"sanitizer internal error: {current.internal[nodeid]}"
            elif outcome not in (PASSED, FAILED, SKIPPED, SETUP_ERROR):
                outcome = FAILED
            display = self._display(current, nodeid)
            reached = _frozen(current.reached.get(nodeid, {}))
            tests[display] = TestRun(display, outcome, reason, reached, current.gaps.get(nodeid))
        if "" in current.reached:  # imports at collection: run under the sanitizer, by no test
            tests[OUTSIDE_TESTS] = TestRun(OUTSIDE_TESTS, PASSED, None, _frozen(current.reached[""]))

    @staticmethod
    def _display(current: _Pass, nodeid: str) -> str:
        """The node id with its file relative to cwd when under it, else absolute (pytest's is
        relative to its rootdir): what a user can paste, and what a re-run passes to pytest."""
        if not nodeid:
            return OUTSIDE_TESTS
        if current.rootdir is None:
            return nodeid
        file, separator, rest = nodeid.partition("::")
        return display_path(Path(current.rootdir, file)) + separator + rest


@cache
def _overrides(workers: int) -> list[str]:
    """Our worker count over a project's `addopts` (`-n auto`), and no pytest-cov (its tracer
    would displace the probe's). Only for plugins that are installed (their options do not
    exist otherwise)."""
    overrides = []
    if importlib.util.find_spec("xdist") is not None:
        overrides += ["-n", str(workers)]
    if importlib.util.find_spec("pytest_cov") is not None:
        overrides += ["--no-cov"]
    return overrides


class _Tails:
    """The files of one pass: each named one, and each xdist worker's part of it (`NAME.gwN`),
    found as the workers create them."""

    def __init__(self, workdir: Path, names: Sequence[str]) -> None:
        self.workdir = workdir
        self.names = tuple(names)
        self.tails: dict[str, _Tail] = {}

    def all(self) -> list[_Tail]:
        for entry in os.listdir(self.workdir):
            name, _, worker = entry.partition(".jsonl")
            if name + ".jsonl" in self.names and entry not in self.tails:
                self.tails[entry] = _Tail(self.workdir / entry, worker.lstrip("."))
        return list(self.tails.values())


def _frozen(lines: Mapping[str, set[int]]) -> dict[str, frozenset[int]]:
    return {path: frozenset(found) for path, found in lines.items()}


@contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM (`timeout`, a cancelled CI job, `kill`) exits through the `finally` that kills the
    test process, not around it: the tests run in a session of their own, which the signal does
    not reach, and would go on running orphaned. Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """The whole process group: a test may have started children of its own."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _log_tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])
