"""pytest plugin (entry point `csan`): `pytest --csan` runs every test under the CUDA stream
sanitizer and fails the tests whose run raced; `--csan-emulate` runs GPU tests on the emulated
device with checking off. A test that fails on the emulated device's own gap (emulation/gaps.py)
is named as such in the terminal summary. Inert and cheap unless one of them is given: torch is
imported only then.
A project turns them on in its ini file instead (`csan`, `csan_device`, `csan_report`,
`csan_report_only`, `csan_ignore` under `[tool.pytest.ini_options]`); a flag on the command line
wins. `--csan-ignore CODES` and a `# noqa: CSL9xx` where a race is reported keep it from failing
its test.

`--csan-report PATH` streams JSON Lines (pytest_report.py says what they hold). On the
emulated device the tests' child processes are checked too, and a child's race is its test's
(child_races.py).

Tests are isolated from each other: each starts on the default stream of every device (a test
that leaves another stream current, say a CUDA graph capture that raised, is named once and the
stream is restored), and a block freed after its test ended (kept alive by a failure's
traceback, collected later) has its race charged to the test that allocated it, not to the
test running at the free. A race record's `nodeid` is the test it is charged to; null: outside
any test. Both are said as a `CsanIsolationWarning` (pytest-xdist relays warnings, not a
worker's terminal output); a late race also fails the run when it is not under xdist.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal

import pytest

from csan_lint.runtime import child_races
from csan_lint.runtime.block_owners import BlockOwners
from csan_lint.runtime.pytest_report import (
    REPORT_VERSION,
    ReportFile,
    ReportMerger,
    facts_out,
    is_xdist_controller,
    trace_out,
    worker_id,
    worker_path,
)

if TYPE_CHECKING:
    from csan_lint.runtime.events import RuntimeErrorReport
    from csan_lint.runtime.facts_recorder import FactsRecorder
    from csan_lint.runtime.sanitizer import Sanitizer

DEVICES = ("auto", "cuda", "emulated")
INI_OPTIONS: dict[str, tuple[Literal["bool", "string"], str]] = {
    "csan": ("bool", "run every test under the CUDA stream sanitizer (as --csan)"),
    "csan_device": ("string", "device for csan: auto (default), cuda or emulated (as --csan-device)"),
    "csan_report": ("string", "write every report to this path, relative to the rootdir (as --csan-report)"),
    "csan_report_only": ("bool", "report races without failing the tests (as --csan-report-only)"),
    "csan_ignore": ("string", "runtime codes (CSL9xx) whose races neither fail nor show (as --csan-ignore)"),
    "csan_device_memory": ("string", "the emulated device's memory, e.g. 16GiB (as --csan-device-memory)"),
    "csan_devices": ("string", "how many devices the emulated machine has (as --csan-devices)"),
}
BETWEEN_TESTS = "code run outside any test (collection, fixtures' teardown)"
"""Who is named for a stream left current outside any test."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("csan", "CUDA stream sanitizer (csan-lint)")
    group.addoption("--csan", action="store_true", help="run every test under the CUDA stream sanitizer")
    group.addoption(
        "--csan-device",
        choices=DEVICES,
        default=None,
        help="device for --csan/--csan-emulate: real CUDA, the emulated device, or auto (default)",
    )
    group.addoption("--csan-report-only", action="store_true", help="report races without failing the tests")
    group.addoption(
        "--csan-device-memory",
        metavar="SIZE",
        help="the emulated device's memory (16GiB, 512MiB, bytes; default 80GiB): past it, torch.OutOfMemoryError",
    )
    group.addoption(
        "--csan-devices",
        metavar="N",
        help="how many devices the emulated machine has (default 1): cuda:0 to cuda:N-1",
    )
    group.addoption("--csan-report", metavar="PATH", help="write every report to PATH (JSON Lines)")
    group.addoption(
        "--csan-ignore",
        metavar="CODES",
        help="races of these runtime codes (CSL904, CSL9, runtime-free-in-use; comma-separated) neither "
        "fail a test nor show; they are still written to --csan-report",
    )
    group.addoption(
        "--csan-trace-out",
        metavar="PATH",
        help="draw the run as a Chrome/Perfetto trace at PATH (PATH.jsonl: the JSON Lines trace --replay reads)",
    )
    group.addoption(
        "--csan-facts",
        metavar="PATH",
        help="save what the run observed about the tested code's functions to PATH (JSON; csan-lint --facts reads it)",
    )
    for name, (kind, help_text) in INI_OPTIONS.items():
        parser.addini(name, help_text, type=kind, default=False if kind == "bool" else "")
    group.addoption(
        "--csan-report-parts",
        action="store_true",
        help="internal to csan-lint --confirm: leave each pytest-xdist worker's PATH.gwN unmerged",
    )
    group.addoption(
        "--csan-emulate",
        action="store_true",
        help="run GPU tests on the emulated CUDA device (even where a GPU is present), without checking",
    )
    group.addoption(
        "--csan-unchecked",
        action="store_true",
        help="internal to csan-lint --confirm: the --csan session (device, report) with the sanitizer off",
    )


_MEMORY_SAVED = pytest.StashKey[str | None]()
"""The environment's device memory size before `--csan-device-memory` set it."""
_DEVICES_SAVED = pytest.StashKey[str | None]()
"""The environment's device count before `--csan-devices` set it."""
_EMULATION_OWNED = pytest.StashKey[bool]()
"""Set on a config whose plugin turned the emulated device on (and turns it off at the end)."""


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Turns the emulated device on before the first conftest is imported: code that caches
    `torch.cuda.is_available()` or a device name at import time (a conftest's `pytest_addoption`
    importing the suite's utilities) must see it, or every GPU test is skipped silently."""
    options = early_config.known_args_namespace
    if not (_setting(early_config, "csan", options) or options.csan_emulate or options.csan_unchecked):
        return
    if _device(early_config, options) == "emulated":
        _set_device_memory(early_config, options)
        _set_device_count(early_config, options)
        _own_emulation(early_config)


def _set_device_memory(config: pytest.Config, options: Any) -> None:
    """`--csan-device-memory`: the emulated device reads (and child processes inherit) it from
    the environment; given back at the end of the session."""
    from csan_lint.runtime.emulation import device
    from csan_lint.runtime.emulation.allocator import MEMORY_VARIABLE, parse_size

    size = _setting(config, "csan_device_memory", options)
    if not size:
        return
    try:
        device.set_memory_size(parse_size(size))  # already on in a child of an emulated run
    except ValueError as error:
        raise pytest.UsageError(f"--csan-device-memory: {error}") from None
    config.stash[_MEMORY_SAVED] = os.environ.get(MEMORY_VARIABLE)
    os.environ[MEMORY_VARIABLE] = size


def _set_device_count(config: pytest.Config, options: Any) -> None:
    """`--csan-devices`: the emulation reads (and child processes inherit) it from the
    environment when it starts; given back at the end of the session."""
    from csan_lint.runtime import emulation
    from csan_lint.runtime.emulation import machine

    count = _setting(config, "csan_devices", options)
    if not count:
        return
    saved = os.environ.get(machine.DEVICES_VARIABLE)
    os.environ[machine.DEVICES_VARIABLE] = str(count)
    try:
        wanted = machine.device_count_from_environment()
    except ValueError as error:
        _restore(machine.DEVICES_VARIABLE, saved)
        raise pytest.UsageError(f"--csan-devices: {error}") from None
    if emulation.is_active() and wanted != machine.DEVICE_COUNT:
        _restore(machine.DEVICES_VARIABLE, saved)
        raise pytest.UsageError(
            f"--csan-devices {wanted}: the emulated device is already on with {machine.DEVICE_COUNT} devices"
        )
    config.stash[_DEVICES_SAVED] = saved


def _restore(variable: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = value


def _own_emulation(config: pytest.Config) -> None:
    from csan_lint.runtime import emulation

    if not emulation.is_active():
        emulation.activate()
        config.stash[_EMULATION_OWNED] = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After the session's own unconfigure (registered later, so called earlier)."""
    if config.stash.get(_EMULATION_OWNED, False):
        from csan_lint.runtime import emulation

        emulation.deactivate()
        config.stash[_EMULATION_OWNED] = False
    if _MEMORY_SAVED in config.stash:
        from csan_lint.runtime.emulation.allocator import MEMORY_VARIABLE

        _restore(MEMORY_VARIABLE, config.stash[_MEMORY_SAVED])
    if _DEVICES_SAVED in config.stash:
        from csan_lint.runtime.emulation.machine import DEVICES_VARIABLE

        _restore(DEVICES_VARIABLE, config.stash[_DEVICES_SAVED])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "csan(enabled=True): enabled=False runs the test without the CUDA stream sanitizer"
    )
    if not (_setting(config, "csan") or config.getoption("csan_emulate") or config.getoption("csan_unchecked")):
        return
    if is_xdist_controller(config):  # it runs no test: its workers each have a session
        path = _setting(config, "csan_report")
        if path and not config.getoption("csan_report_parts"):
            config.pluginmanager.register(ReportMerger(path), "csan-report-merger")
        return
    # Before collection: test modules evaluate `skipif(not torch.cuda.is_available())` on import.
    config.pluginmanager.register(CsanSession(config), "csan-session")


def _setting(config: pytest.Config, name: str, options: Any = None) -> Any:
    """The command line's value when given (in `options`, before pytest has parsed the whole
    command line), else the ini file's (paths there are relative to the rootdir; a device there
    is checked as the flag's choices are)."""
    given = getattr(options, name) if options is not None else config.getoption(name)
    if given:
        return given
    value = config.getini(name)
    if name == "csan_device" and value:
        if value not in DEVICES:
            raise pytest.UsageError(f"ini option csan_device: expected one of {', '.join(DEVICES)}, got {value!r}")
    elif name == "csan_report" and value:
        value = str(config.rootpath / value)
    return value


def _device(config: pytest.Config, options: Any) -> str:
    """The device the session runs on ("cuda" or "emulated"), from the flags in `options`."""
    from csan_lint.runtime.sanitizer import resolve_device

    requested = _setting(config, "csan_device", options) or "auto"
    if options.csan_emulate:
        if requested == "cuda":
            raise pytest.UsageError("--csan-emulate runs on the emulated device, not --csan-device cuda")
        requested = "emulated"  # even where a GPU is present: the CPU baseline
    try:
        return resolve_device(requested)
    except RuntimeError as error:
        raise pytest.UsageError(f"--csan-device: {error}") from None


def _ignored_codes(value: str | None) -> frozenset[str]:
    """The runtime codes `--csan-ignore` / `csan_ignore` name; a selector naming none is an error."""
    from csan_lint.runtime.kinds import runtime_codes_of

    codes: set[str] = set()
    for selector in (item.strip() for item in (value or "").split(",")):
        if selector:
            found = runtime_codes_of(selector)
            if not found:
                raise pytest.UsageError(
                    f"--csan-ignore: `{selector}` names no runtime code (CSL901-CSL909, `csan-lint --list-rules`)"
                )
            codes |= found
    return frozenset(codes)


class CsanIsolationWarning(UserWarning):
    """A test left state behind (a current stream) or a race was found after its test ended."""


def _warn(message: str) -> None:
    try:
        warnings.warn(message, CsanIsolationWarning, stacklevel=2)
    except Warning:
        pass  # warnings turned into errors (-W error) must not break the user's run


def _entry_codes() -> set[int]:
    """pytest's calls into test functions and fixtures (code ids): stack walks stop there.
    The functions live as long as pytest's modules, so their ids stay theirs."""
    from _pytest import fixtures, python

    functions = (getattr(python, "pytest_pyfunc_call", None), getattr(fixtures, "call_fixture_func", None))
    return {id(f.__code__) for f in functions if f is not None}


def _render(reports: list[RuntimeErrorReport | child_races.ChildRace]) -> str:
    from csan_lint.runtime.report import render_text

    try:
        return "\n\n".join(r.text() if isinstance(r, child_races.ChildRace) else render_text(r) for r in reports)
    except Exception as error:  # a rendering bug must not become the user's failure
        kinds = ", ".join(r.kind for r in reports)
        return f"csan: {kinds} (internal error while rendering: {type(error).__name__}: {error})"


class CsanSession:
    """The plugin's state for one pytest session (registered only when asked for)."""

    def __init__(self, config: pytest.Config) -> None:
        self.report_only: bool = _setting(config, "csan_report_only")
        self.device = _device(config, config.option)
        path = _setting(config, "csan_report")
        path = worker_path(config, path) if path else path
        try:
            self.report = ReportFile(path) if path else None
        except OSError as error:
            raise pytest.UsageError(f"--csan-report: cannot write {path}: {error.strerror}") from None
        if self.device == "emulated":
            _own_emulation(config)  # already on, unless the plugin was registered late
        self.sanitizer: Sanitizer | None = None
        self.facts: FactsRecorder | None = None
        self.facts_path: str | None = None
        self.nodeid: str | None = None
        self.outcome = "passed"
        self.longrepr: str | None = None
        self.reason: str | None = None
        """The test's first failure in one line: the exception's type and its message's first line."""
        self.gap: str | None = None
        """The emulated device's gap the test failed on (emulation/gaps.py), if it did."""
        self.gaps: list[tuple[str, str]] = []
        """(node id, gap) of every test that failed on a gap: the terminal summary names them."""
        self.ignored = _ignored_codes(_setting(config, "csan_ignore"))
        self.late: list[tuple[str, RuntimeErrorReport]] = []
        """Races charged to a test that had ended when they were found (a late free)."""
        self.owners = BlockOwners()
        self.children: child_races.ChildReports | None = None
        """Where the checked children of an emulated run write their races."""
        self.child_keys: set[tuple[Any, ...]] = set()
        """The children's races reported in this test (`race_key`): each once, as the parent's are."""
        self.outside: list[child_races.ChildRace] = []
        """Children's races found after the last test: they fail the run, as late ones do."""
        worker = {"worker": worker_id(config)} if worker_id(config) else {}
        self._write({"type": "session", "version": REPORT_VERSION, "device": self.device, **worker})
        checked = _setting(config, "csan") and not config.getoption("csan_unchecked")
        self.trace = trace_out(config) if checked else None
        if checked:
            from csan_lint.runtime.sanitizer import Sanitizer

            self.sanitizer = Sanitizer(self.device, self.trace.file if self.trace is not None else None)
            self.sanitizer.stack_stop.update(_entry_codes())
            self.sanitizer.listeners.append(self._race)
            self.sanitizer.internal_listeners.append(self._internal_error)
            self.sanitizer.enable()
            self.owners.register()  # after the sanitizer's callbacks
            self.facts, self.facts_path = facts_out(config, self.sanitizer)
            if self.device == "emulated":  # its children are emulated: they check themselves too
                self.children = child_races.ChildReports()
                child_races.follow_forks(self.sanitizer, self.children.directory)

    def _write(self, record: dict[str, Any]) -> None:
        if self.report is not None:
            self.report.write(record)

    def _race(self, report: RuntimeErrorReport) -> None:
        from csan_lint.runtime.report import to_json

        owner = self.owners.charged(report, self.nodeid)
        if owner != self.nodeid and owner is not None:
            self.late.append((owner, report))
            _warn(f"csan: a race found after {owner} ended, charged to it:\n{_render([report])}")
        self._write({"type": "race", "nodeid": owner, "report": to_json(report)})

    def _shown(self, report: RuntimeErrorReport | child_races.ChildRace) -> bool:
        """Not ignored by its code (`--csan-ignore`), nor by a `# noqa` for it where it is reported."""
        from csan_lint.runtime import kinds
        from csan_lint.runtime.confirm_filter import suppressed_at
        from csan_lint.runtime.confirm_verdict import race_site
        from csan_lint.runtime.report import to_json

        code = kinds.code_of(report.kind)
        if code in self.ignored:
            return False
        site = race_site(report.report if isinstance(report, child_races.ChildRace) else to_json(report))
        return site is None or not suppressed_at(site[0], site[1], code)

    def _restore_default_streams(self, owner: str | None) -> None:
        """Puts every device back on its default stream, naming `owner` (None: outside any test)
        once per stream it left current. Never fails the user's run: an error here is ours."""
        try:
            import torch

            for device in range(torch.cuda.device_count()):
                current, default = torch.cuda.current_stream(device), torch.cuda.default_stream(device)
                if current != default:
                    torch.cuda.set_stream(default)
                    _warn(
                        f"csan: {owner or BETWEEN_TESTS} left stream {current.cuda_stream} current on "
                        f"cuda:{device}; the default stream was restored"
                    )
                    self._write(
                        {"type": "stream-leak", "nodeid": owner, "device": device, "stream": current.cuda_stream}
                    )
        except Exception as error:
            self._internal_error(f"restoring the default stream: {type(error).__name__}: {error}")

    def _internal_error(self, message: str) -> None:
        self._write({"type": "internal-error", "nodeid": self.nodeid, "message": message})

    def _from_children(self) -> list[child_races.ChildRace]:
        """The races child processes wrote since the last look, charged to the running test
        (None: after the last test), each once per test; a child's internal error is said."""
        if self.children is None:
            return []
        races, errors = self.children.collect()
        for message in errors:
            self._internal_error(message)
            _warn(f"csan: internal error in a {message}")
        if self.sanitizer is not None and self.sanitizer.paused:  # the test opted out
            return []
        from csan_lint.runtime.confirm_verdict import race_key

        new = []
        for race in races:
            if race_key(race.report) not in self.child_keys:
                self.child_keys.add(race_key(race.report))
                self._write({"type": "race", "nodeid": self.nodeid, "report": race.report})
                new.append(race)
        return new

    # -- per test ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._restore_default_streams(None)
        self.nodeid = nodeid
        self.owners.test = nodeid
        if self.facts is not None:
            self.facts.test = nodeid
        self.outcome = "passed"
        self.longrepr = None
        self.reason = None
        self.gap = None
        self._write({"type": "test-start", "nodeid": nodeid})

    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        sanitizer = self.sanitizer
        if sanitizer is None:
            return
        if sanitizer.broken:
            sanitizer.restart()  # the previous test's internal error left the state unsure
            self.owners.register()
        sanitizer.tracker.reported.clear()  # each test gets its own reports, as under xdist
        self.child_keys.clear()
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
        try:
            return (yield from self._checked(item, "teardown"))
        finally:
            self._restore_default_streams(item.nodeid)

    def _checked(self, item: pytest.Item, when: str) -> Generator[None, None, None]:
        """Run one phase; races found in it fail it (unless --csan-report-only) when it
        would otherwise pass, and are shown in a "csan" section of the test's report."""
        sanitizer = self.sanitizer
        if sanitizer is None:
            return (yield)
        before, late = len(sanitizer.errors), len(self.late)
        result = None
        try:
            result = yield
        finally:
            elsewhere = {id(report) for _, report in self.late[late:]}
            found: list[RuntimeErrorReport | child_races.ChildRace] = [
                report for report in sanitizer.errors[before:] if id(report) not in elsewhere and self._shown(report)
            ]
            found += [race for race in self._from_children() if self._shown(race)]
            if found:
                text = _render(found)
                item.add_report_section(when, "csan", text)
        races = [r for r in found if r.severity == "error"]
        if races and not self.report_only:
            pytest.fail(f"CUDA stream sanitizer: {len(races)} race(s)\n\n{text}", pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Names the first failure in one line, and a failure on the emulated device's own gap as
        one, in the test's report too (pytest-xdist relays that, not our terminal summary)."""
        report = yield
        if report.failed and call.excinfo is not None and self.reason is None:
            error = call.excinfo.value
            lines = str(error).strip().splitlines()
            self.reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
            if self.device == "emulated":
                from csan_lint.runtime.emulation.gaps import gap_of

                self.gap = gap_of(error)
            if self.gap is not None:
                self.gaps.append((item.nodeid, self.gap))
                report.sections.append(("csan: emulation gap", self.gap))
        return report

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
                "reason": self.reason,
                "gap": self.gap,
            }
        )
        self.nodeid = None
        self.owners.test = None
        if self.facts is not None:
            self.facts.test = None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Tests that failed on the emulated device's gaps, said apart from the program's failures;
        children's races found after the last test."""
        if self.outside:
            terminalreporter.section("csan: races in child processes after the last test", red=True)
            terminalreporter.line(_render(list(self.outside)))
        if not self.gaps:
            return
        terminalreporter.section("csan: failed on the emulated device's gaps, not on the tests' code", red=True)
        for nodeid, gap in self.gaps:
            terminalreporter.line(f"{nodeid}: {gap}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A late race, or a child's after the last test, fails the run (no test of its own is left to fail)."""
        self.outside += self._from_children()
        found: list[RuntimeErrorReport | child_races.ChildRace] = [report for _, report in self.late]
        races = [report for report in found + self.outside if report.severity == "error" and self._shown(report)]
        if races and not self.report_only and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.owners.unregister()
        if self.children is not None:
            child_races.follow_forks(None)
            self.children.close()
        if self.sanitizer is not None:
            self.sanitizer.disable()
        if self.facts is not None and self.facts_path is not None:
            try:
                self.facts.write(self.facts_path)
            except OSError as error:  # after the session: too late for a warning to be shown
                print(f"csan: --csan-facts: cannot write {self.facts_path}: {error.strerror}", file=sys.stderr)
        if self.trace is not None:
            problem = self.trace.close()
            if problem:  # after the session: too late for a warning to be shown
                print(f"csan: --csan-trace-out: {problem}", file=sys.stderr)
        if self.report is not None:
            self.report.close()
