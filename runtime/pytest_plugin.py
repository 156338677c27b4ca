"""pytest plugin (entry point `csan`): `pytest --csan` runs every test under the CUDA stream
sanitizer and fails the tests whose run raced; `--csan-emulate` runs GPU tests on the emulated
device with checking off. Inert and cheap unless one of them is given: torch is imported only then.
A project turns them on in its ini file instead (`csan`, `csan_device`, `csan_report`,
`csan_report_only` under `[tool.pytest.ini_options]`); a flag on the command line wins.

`--csan-report PATH` streams JSON Lines, flushed line by line so that a crash loses nothing:
    {"type": "session", "version": 1, "device": "emulated" | "cuda"}
    {"type": "test-start", "nodeid": ...}
    {"type": "race", "nodeid": ..., "report": <report JSON>}
    {"type": "internal-error", "nodeid": ..., "message": ...}
    {"type": "test-end", "nodeid": ..., "outcome": "passed" | "failed" | "skipped" | "error", "longrepr": ...}
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import IO, TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from csan_lint.runtime.events import RuntimeErrorReport
    from csan_lint.runtime.sanitizer import Sanitizer

REPORT_VERSION = 1
DEVICES = ("auto", "cuda", "emulated")
INI_OPTIONS: dict[str, tuple[Literal["bool", "string"], str]] = {
    "csan": ("bool", "run every test under the CUDA stream sanitizer (as --csan)"),
    "csan_device": ("string", "device for csan: auto (default), cuda or emulated (as --csan-device)"),
    "csan_report": ("string", "write every report to this path, relative to the rootdir (as --csan-report)"),
    "csan_report_only": ("bool", "report races without failing the tests (as --csan-report-only)"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("csan", "CUDA stream sanitizer (csan-lint)")
    group.addoption("--csan", action="store_true", help="run every test under the CUDA stream sanitizer")
    group.addoption(
        "--csan-device",
        choices=DEVICES,
        default=None,
        help="device for --csan/--csan-emulate: real CUDA, the emulated device, or auto (default)",
    )
    group.addoption(
        "--csan-report-only", action="store_true", help="report races without failing the tests"
    )
    group.addoption("--csan-report", metavar="PATH", help="write every report to PATH (JSON Lines)")
    for name, (kind, help_text) in INI_OPTIONS.items():
        parser.addini(name, help_text, type=kind, default=False if kind == "bool" else "")
    group.addoption(
        "--csan-emulate",
        action="store_true",
        help="run GPU tests on the emulated CUDA device (even where a GPU is present), without checking",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "csan(enabled=True): enabled=False runs the test without the CUDA stream sanitizer"
    )
    if not (_setting(config, "csan") or config.getoption("csan_emulate")):
        return
    # Before collection: test modules evaluate `skipif(not torch.cuda.is_available())` on import.
    config.pluginmanager.register(CsanSession(config), "csan-session")


def _setting(config: pytest.Config, name: str) -> Any:
    """The command line's value when given, else the ini file's (paths there are relative to
    the rootdir; a device there is checked as the flag's choices are)."""
    given = config.getoption(name)
    if given:
        return given
    value = config.getini(name)
    if name == "csan_device" and value:
        if value not in DEVICES:
            raise pytest.UsageError(f"ini option csan_device: expected one of {', '.join(DEVICES)}, got {value!r}")
    elif name == "csan_report" and value:
        value = str(config.rootpath / value)
    return value


def _entry_codes() -> set[int]:
    """pytest's calls into test functions and fixtures (code ids): stack walks stop there.
    The functions live as long as pytest's modules, so their ids stay theirs."""
    from _pytest import fixtures, python

    functions = (getattr(python, "pytest_pyfunc_call", None), getattr(fixtures, "call_fixture_func", None))
    return {id(f.__code__) for f in functions if f is not None}


def _render(reports: list[RuntimeErrorReport]) -> str:
    from csan_lint.runtime.report import render_text

    try:
        return "\n\n".join(render_text(r) for r in reports)
    except Exception as error:  # a rendering bug must not become the user's failure
        kinds = ", ".join(r.kind for r in reports)
        return f"csan: {kinds} (internal error while rendering: {type(error).__name__}: {error})"


class _ReportFile:
    """JSON Lines, flushed after each line."""

    def __init__(self, path: str) -> None:
        self.file: IO[str] = open(path, "w", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class CsanSession:
    """The plugin's state for one pytest session (registered only when asked for)."""

    def __init__(self, config: pytest.Config) -> None:
        from csan_lint.runtime import emulation
        from csan_lint.runtime.sanitizer import resolve_device

        self.report_only: bool = _setting(config, "csan_report_only")
        requested = _setting(config, "csan_device") or "auto"
        if config.getoption("csan_emulate"):
            if requested == "cuda":
                raise pytest.UsageError("--csan-emulate runs on the emulated device, not --csan-device cuda")
            requested = "emulated"  # even where a GPU is present: the CPU baseline
        try:
            self.device = resolve_device(requested)
        except RuntimeError as error:
            raise pytest.UsageError(f"--csan-device: {error}") from None
        path = _setting(config, "csan_report")
        try:
            self.report = _ReportFile(path) if path else None
        except OSError as error:
            raise pytest.UsageError(f"--csan-report: cannot write {path}: {error.strerror}") from None
        self.activated_emulation = False
        if self.device == "emulated" and not emulation.is_active():
            emulation.activate()
            self.activated_emulation = True
        self.sanitizer: Sanitizer | None = None
        self.nodeid: str | None = None
        self.outcome = "passed"
        self.longrepr: str | None = None
        self._write({"type": "session", "version": REPORT_VERSION, "device": self.device})
        if _setting(config, "csan"):
            from csan_lint.runtime.sanitizer import Sanitizer

            self.sanitizer = Sanitizer(self.device)
            self.sanitizer.stack_stop.update(_entry_codes())
            self.sanitizer.listeners.append(self._race)
            self.sanitizer.internal_listeners.append(self._internal_error)
            self.sanitizer.enable()

    def _write(self, record: dict[str, Any]) -> None:
        if self.report is not None:
            self.report.write(record)

    def _race(self, report: RuntimeErrorReport) -> None:
        from csan_lint.runtime.report import to_json

        self._write({"type": "race", "nodeid": self.nodeid, "report": to_json(report)})

    def _internal_error(self, message: str) -> None:
        self._write({"type": "internal-error", "nodeid": self.nodeid, "message": message})

    # -- per test ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.outcome = "passed"
        self.longrepr = None
        self._write({"type": "test-start", "nodeid": nodeid})

    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        sanitizer = self.sanitizer
        if sanitizer is None:
            return
        if sanitizer.broken:
            sanitizer.restart()  # the previous test's internal error left the state unsure
        marker = item.get_closest_marker("csan")
        sanitizer.paused = marker is not None and not marker.kwargs.get("enabled", True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._checked(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._checked(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._checked(item, "teardown"))

    def _checked(self, item: pytest.Item, when: str) -> Generator[None, None, None]:
        """Run one phase; races found in it fail it (unless --csan-report-only) when it
        would otherwise pass, and are shown in a "csan" section of the test's report."""
        sanitizer = self.sanitizer
        if sanitizer is None:
            return (yield)
        before = len(sanitizer.errors)
        result = None
        try:
            result = yield
        finally:
            found = sanitizer.errors[before:]
            if found:
                text = _render(found)
                item.add_report_section(when, "csan", text)
        races = [r for r in found if r.severity == "error"]
        if races and not self.report_only:
            pytest.fail(f"CUDA stream sanitizer: {len(races)} race(s)\n\n{text}", pytrace=False)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.passed:
            return
        if report.when == "call":
            outcome = "failed" if report.failed else "skipped"
        elif report.failed:
            outcome = "error"
        else:
            outcome = "skipped"
        if self.outcome in ("passed", "skipped"):
            self.outcome = outcome
            self.longrepr = str(report.longrepr) if report.longrepr is not None else None

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._write(
            {
                "type": "test-end",
                "nodeid": nodeid,
                "outcome": self.outcome,
                "longrepr": self.longrepr,
            }
        )
        self.nodeid = None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.sanitizer is not None:
            self.sanitizer.disable()
        if self.activated_emulation:
            from csan_lint.runtime import emulation

            emulation.deactivate()
        if self.report is not None:
            self.report.close()
