"""Races in child processes reach the parent's run.

A sanitized parent (`pytest --csan`, and so `csan-lint --confirm`, which runs it) on the
emulated device names a directory in `CSAN_LINT_CHILD_REPORTS`, next to the variable that
makes its children emulated (emulation/children.py). A child that sees both runs the sanitizer
too, once it imports torch, and appends each race to a JSON Lines file of its own in that
directory, flushed the moment the race is found:
    {"type": "race", "report": <report.to_json>, "child": {"pid", "argv"[, "forked_from"]}}
    {"type": "internal-error", "message": ..., "child": ...}     (the child's own failure to check)
Written as found, not at exit: multiprocessing's fork and forkserver workers end in `os._exit`
(no atexit handler, no finalizer runs), a child that crashes later has lost nothing, and a pool
worker that outlives a test has its races charged to the test that was running when they
happened. A child that crashes before its race is found reported nothing: its test's own
outcome (a non-zero exit, a broken pool) says so; nothing is invented for it.

The parent reads the files' new complete lines after each test phase (`ChildReports.collect`).
A child forked from the parent inherits the parent's sanitizer: `follow_forks` points it at
its own file in the same directory.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csan_lint.runtime.events import RuntimeErrorReport
    from csan_lint.runtime.sanitizer import Sanitizer

REPORTS_VARIABLE = "CSAN_LINT_CHILD_REPORTS"
COMMAND_SHOWN = 100
"""Characters of a child's command line shown in a message (all of it is in the JSON)."""


def describe(child: dict[str, Any]) -> str:
    """`child process 1234 (`python -c 'import torch; ...'`)`, the command line cut short; a
    fork says which process it is a copy of (its command line is that process's)."""
    argv = [os.path.basename(child["argv"][0]), *child["argv"][1:]] if child.get("argv") else []
    command = textwrap.shorten(shlex.join(argv), COMMAND_SHOWN, placeholder=" ...") if argv else "?"
    forked = f" forked from {child['forked_from']}" if child.get("forked_from") else ""
    return f"child process {child.get('pid', '?')}{forked} (`{command}`)"


class ChildWriter:
    """The child's end: one file per process, opened at its first line (a clean child leaves
    none); a fork of `started_in`, the process the sanitizer started in, opens its own."""

    def __init__(self, directory: str, started_in: int) -> None:
        self.directory = directory
        self.started_in = started_in
        self.file: IO[str] | None = None
        self.pid: int | None = None

    def _write(self, record: dict[str, Any]) -> None:
        """One line, flushed; where the directory is gone (the parent's session ended before
        this child did), the record goes to stderr instead of breaking the child."""
        child: dict[str, Any] = {"pid": os.getpid(), "argv": list(getattr(sys, "orig_argv", sys.argv))}
        if child["pid"] != self.started_in:
            child["forked_from"] = self.started_in
        line = json.dumps({**record, "child": child})
        try:
            if self.pid != child["pid"]:
                handle, _ = tempfile.mkstemp(prefix=f"{child['pid']}-", suffix=".jsonl", dir=self.directory)
                self.file, self.pid = os.fdopen(handle, "w", encoding="utf-8"), child["pid"]
            assert self.file is not None
            self.file.write(line + "\n")
            self.file.flush()
        except OSError as error:
            sys.stderr.write(f"csan: the parent run's directory cannot take this child's report ({error}):\n{line}\n")

    def race(self, report: RuntimeErrorReport) -> None:
        from csan_lint.runtime.report import to_json

        self._write({"type": "race", "report": to_json(report)})

    def internal_error(self, message: str) -> None:
        self._write({"type": "internal-error", "message": message})


class _Started:
    """The sanitizer this child started for its parent (None: not a sanitized child)."""

    sanitizer: Sanitizer | None = None


def start_in_child() -> None:
    """At a child's start (the emulated device just turned on): check it when the parent asks.
    A failure to start is said to the parent as the child's internal error, never raised into
    the user's program."""
    directory = os.environ.get(REPORTS_VARIABLE)
    if not directory or _Started.sanitizer is not None:
        return
    writer = ChildWriter(directory, os.getpid())
    try:
        from csan_lint.runtime.sanitizer import Sanitizer

        sanitizer = Sanitizer("emulated")
        sanitizer.listeners.append(writer.race)
        sanitizer.internal_listeners.append(writer.internal_error)
        sanitizer.enable()
        _Started.sanitizer = sanitizer
    except Exception as error:
        message = f"the sanitizer did not start in this child: {type(error).__name__}: {error}"
        sys.stderr.write(f"csan: {message}\n")
        writer.internal_error(message)


def stop_in_child() -> None:
    """Another sanitizer enabled in this child (a nested `pytest --csan`, the user's own
    `sanitize()`) takes over checking it: its races are its own run's."""
    sanitizer, _Started.sanitizer = _Started.sanitizer, None
    if sanitizer is not None:
        sanitizer.disable()


@dataclass(frozen=True)
class ChildRace:
    """A race a child process reported: its `report.to_json`, with `child` ({pid, argv}) added
    and the message saying which process it happened in."""

    report: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.report.get("kind"))

    @property
    def severity(self) -> str:
        return str(self.report.get("severity", "error"))

    def text(self) -> str:
        """The race as the parent's are rendered, under a line naming the child."""
        from csan_lint.runtime.confirm_output import render_race

        return render_race(self.report)


class ChildReports:
    """The parent's end: a fresh directory named in the environment children inherit, read
    line by line as the children write (only complete lines: a child may be mid-write)."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="csan-children-")
        self.read: dict[str, int] = {}
        """Bytes of each file taken so far."""
        self.saved = os.environ.get(REPORTS_VARIABLE)
        os.environ[REPORTS_VARIABLE] = self.directory

    def collect(self) -> tuple[list[ChildRace], list[str]]:
        """What the children wrote since the last call: their races, and their internal errors
        as messages naming the child."""
        races: list[ChildRace] = []
        errors: list[str] = []
        for name in sorted(os.listdir(self.directory)):
            for record in self._new_records(name):
                child = record.get("child") or {}
                if record.get("type") == "race":
                    report = dict(record["report"])
                    report["child"] = child
                    report["message"] = f"in {describe(child)}: {report.get('message') or report.get('kind')}"
                    races.append(ChildRace(report))
                elif record.get("type") == "internal-error":
                    errors.append(f"{describe(child)}: {record.get('message')}")
        return races, errors

    def _new_records(self, name: str) -> list[dict[str, Any]]:
        try:
            with open(os.path.join(self.directory, name), "rb") as file:
                file.seek(self.read.get(name, 0))
                data = file.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.read[name] = self.read.get(name, 0) + len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def close(self) -> None:
        """Children started from now on are not checked; the directory goes."""
        if self.saved is None:
            os.environ.pop(REPORTS_VARIABLE, None)
        else:
            os.environ[REPORTS_VARIABLE] = self.saved
        shutil.rmtree(self.directory, ignore_errors=True)


class _Forks:
    """The sanitizer a fork of this process inherits and where its races go (None: none)."""

    sanitizer: Sanitizer | None = None
    directory = ""
    registered = False


def _after_fork_in_child() -> None:
    sanitizer = _Forks.sanitizer
    if sanitizer is None:
        return
    writer = ChildWriter(_Forks.directory, os.getppid())
    sanitizer.listeners[:] = [writer.race]
    sanitizer.internal_listeners[:] = [writer.internal_error]


def follow_forks(sanitizer: Sanitizer | None, directory: str = "") -> None:
    """A child forked from now on reports `sanitizer`'s races into `directory` instead of to
    the parent's listeners (whose state the fork only copies); None: forks are left alone."""
    _Forks.sanitizer, _Forks.directory = sanitizer, directory
    if not _Forks.registered and sanitizer is not None:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _Forks.registered = True
