"""`csan-lint --confirm`: every test that runs stream code, under the sanitizer; a verdict for
every static finding and a place for every race.

Static pass (done by the CLI) and the stream code under the paths (`confirm_select.stream_code`,
the linter's own recognizer) -> test selection by imports (`confirm_select`) -> one sanitized
pytest run with per-test line coverage (`confirm_run`, `confirm_probe`) -> verdicts by source
position (`confirm_verdict`) -> output (`confirm_output`). This module only wires them and owns
the settings: `[tool.csan-lint.confirm]` overridden by the command line.

Exit status: 1 if a race was seen (confirming a finding or runtime-only; and for the verdicts
`--fail-on` adds) unless `--exit-zero`, or a test failed (whatever `--exit-zero` says: a run
whose tests failed never passes); 2 when the check could not be made at all, or a test failed
on the emulated device's gap or on a sanitizer error; 0 otherwise.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.registry import rule_by_code
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import display_path
from csan_lint.runtime.confirm_filter import BaselineError, hidden_line, load_baseline, shown, summary_of
from csan_lint.runtime.confirm_output import format_json, format_junit, format_text
from csan_lint.runtime.confirm_run import RunError, Runner, RunSettings
from csan_lint.runtime.confirm_select import (
    DEFAULT_TEST_FILES,
    LaterAnalyses,
    LateSpans,
    Progress,
    Selection,
    SelectionError,
    default_test_paths,
    find_pytest_config,
    select_tests,
    stream_code,
)
from csan_lint.runtime.confirm_verdict import (
    CONFIRMED,
    VERDICTS,
    RunResult,
    TestRun,
    decide,
    failures_of,
    failures_status,
    needs_unchecked_run,
    real,
)
from csan_lint.runtime.warm_python import WarmPython

EXIT_CLEAN, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
CONFIG_KEYS = ("tests", "timeout", "device", "fail-on")
DEVICES = ("auto", "cuda", "emulated")
DEFAULT_TIMEOUT = 60.0
REQUIREMENTS = ("torch", "pytest", "coverage")
INSTALL_HINT = "pip install torch==2.13.0 'csan-lint[runtime]' (or install your CUDA build of torch first)"
"""Torch first and pinned: an unpinned torch pulls the newest CUDA build, several GB."""


class ConfirmUsageError(Exception):
    """A bad option or `[tool.csan-lint.confirm]` value: says where, exits 2."""


@dataclass(frozen=True)
class ConfirmSettings:
    tests: tuple[str, ...] | None
    """Test paths to choose from; None: pytest's `testpaths`, else `tests/`."""
    timeout: float = DEFAULT_TIMEOUT
    device: str = "auto"
    fail_on: frozenset[str] = frozenset({CONFIRMED})
    verbose: bool = False
    output_format: str = "text"
    quiet: bool = False
    exit_zero: bool = False
    """`--exit-zero`: report, but exit 0 whatever the verdicts (2 still means it could not run)."""
    all_tests: bool = False
    """`--all-tests`: run every test file, not only those that import stream code."""
    workers: int = 0
    """`-n N`: pytest-xdist worker processes (0: the tests run in one process)."""
    keyword: str | None = None
    """`-k EXPRESSION`: pytest's, narrowing the selected tests (a long test file run for one case)."""
    baseline: str | None = None
    """`--baseline FILE`: an earlier JSON report; only races it does not have are shown."""
    trace_out: str | None = None
    """`--trace-out FILE`: the sanitized run drawn as a Chrome trace (docs/trace-format.md)."""
    devices: int | None = None
    """`--devices N`: the emulated machine's device count (pytest's `--csan-devices`); None: 1."""
    save_facts: str | None = None
    """`--save-facts FILE`: what the sanitized run observed, for `csan-lint --facts` (lint/run_facts.py)."""


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def _fail_on(value: object, where: str) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise ConfirmUsageError(f"{where}: expected verdicts, got {value!r}")
    verdicts = {item.strip() for item in items if item.strip()}
    for verdict in verdicts:
        if verdict not in VERDICTS:
            raise ConfirmUsageError(
                f"{where}: unknown verdict `{verdict}` (one of {', '.join(VERDICTS)}){_suggest(verdict, VERDICTS)}"
            )
    return frozenset(verdicts | {CONFIRMED})


def _timeout(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfirmUsageError(f"{where}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _device(value: object, where: str) -> str:
    if value not in DEVICES:
        raise ConfirmUsageError(
            f"{where}: expected one of {', '.join(DEVICES)}, got {value!r}{_suggest(str(value), DEVICES)}"
        )
    return str(value)


def resolve_settings(config: Config, options: Mapping[str, Any]) -> ConfirmSettings:
    """The config file's `[tool.csan-lint.confirm]`, validated, with the command line on top.
    Test paths in the file are relative to the file's directory."""
    table = config.confirm
    where = f"{display_path(config.source) if config.source else 'config'} [tool.csan-lint.confirm]"
    for key in table:
        if key not in CONFIG_KEYS:
            raise ConfirmUsageError(f"{where}: unknown key `{key}`{_suggest(key, CONFIG_KEYS)}")
    tests: tuple[str, ...] | None = None
    timeout, device, fail_on = DEFAULT_TIMEOUT, "auto", frozenset({CONFIRMED})
    if "tests" in table:
        value = [table["tests"]] if isinstance(table["tests"], str) else table["tests"]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfirmUsageError(f"{where}: tests: expected a list of paths, got {table['tests']!r}")
        tests = tuple(os.path.relpath(config.root / item) for item in value)
    if "timeout" in table:
        timeout = _timeout(table["timeout"], f"{where}: timeout")
    if "device" in table:
        device = _device(table["device"], f"{where}: device")
    if "fail-on" in table:
        fail_on = _fail_on(table["fail-on"], f"{where}: fail-on")
    if options.get("tests"):
        tests = tuple(options["tests"])
    if options.get("timeout") is not None:
        timeout = _timeout(options["timeout"], "--timeout")
    if options.get("device") is not None:
        device = _device(options["device"], "--device")
    if options.get("fail_on") is not None:
        fail_on = _fail_on(options["fail_on"], "--fail-on")
    return ConfirmSettings(
        tests=tests,
        timeout=timeout,
        device=device,
        fail_on=fail_on,
        verbose=bool(options.get("verbose")),
        output_format=options.get("output_format") or "text",
        quiet=bool(options.get("quiet")),
        exit_zero=bool(options.get("exit_zero")),
        all_tests=bool(options.get("all_tests")),
        workers=_workers(options.get("workers")),
        keyword=options.get("keyword") or None,
        baseline=options.get("baseline") or None,
        trace_out=os.path.abspath(options["trace_out"]) if options.get("trace_out") else None,
        devices=_devices(options.get("devices"), device),
        save_facts=os.path.abspath(options["save_facts"]) if options.get("save_facts") else None,
    )


def _save_facts(workdir: Path, settings: ConfirmSettings) -> None:
    """The facts files of the sanitized pytest processes (and their xdist workers), merged."""
    from csan_lint.lint.run_facts import merge_files

    assert settings.save_facts is not None
    merge_files(sorted(str(path) for path in workdir.glob("facts-*.json*")), settings.save_facts)
    _say(settings, f"The run's facts: {settings.save_facts} (csan-lint --facts reads them).")


def _devices(value: object, device: str) -> int | None:
    """`--devices N` (its upper bound is the emulation's, checked by the pytest plugin)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfirmUsageError(f"--devices: expected a number of devices (1 or more), got {value!r}")
    if device == "cuda":
        raise ConfirmUsageError("--devices sets the emulated machine's devices; --device cuda runs on the real ones")
    return value


def _workers(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfirmUsageError(f"-n: expected a number of worker processes (0 or more), got {value!r}")
    if value and importlib.util.find_spec("xdist") is None:
        raise ConfirmUsageError(f"-n {value} needs pytest-xdist: pip install pytest-xdist")
    return value


def missing_requirements() -> list[str]:
    """What `--confirm` needs that is not importable, found without importing it."""
    return [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]


class _ProgressBar:
    """A bar driven by the work as it ends (the tests, the files parsed); started when the count
    is known."""

    def __init__(self, label: str = "Running tests") -> None:
        self.label = label
        self.bar: Any = None
        self.shown = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.shown)
        self.shown = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _show_progress(settings: ConfirmSettings) -> bool:
    """On a terminal only: not in CI logs, not with `-q`, not for JSON."""
    return not settings.quiet and settings.output_format == "text" and sys.stderr.isatty() and not os.environ.get("CI")


def _say(settings: ConfirmSettings, message: str) -> None:
    if not settings.quiet:
        click.echo(message, err=True)


def _error(message: str) -> int:
    click.echo(f"error: {message}", err=True)
    return EXIT_ERROR


def _test_paths(settings: ConfirmSettings, paths: Sequence[str]) -> tuple[list[str], Sequence[str]]:
    if settings.tests is not None:
        config = find_pytest_config(Path(os.path.abspath(settings.tests[0].split("::")[0])))
        return list(settings.tests), config.python_files if config else DEFAULT_TEST_FILES
    found, config = default_test_paths(paths)
    return found, config.python_files if config else DEFAULT_TEST_FILES


def _shown_paths(test_paths: Sequence[str]) -> str:
    return ", ".join(os.path.relpath(path.split("::")[0]) for path in test_paths) or "no test path"


def watched(
    findings: Sequence[Finding],
    paths: Sequence[str],
    config: Config,
    progress: Progress | None = None,
    known: Mapping[str, frozenset[int]] | None = None,
    later: LaterAnalyses | None = None,
) -> Mapping[str, list[Span]]:
    """Real path -> the spans the run watches: the stream code under `paths` (`known`: what the
    static pass recognized already; `later`: files it still analyses), and the findings'."""
    spans = stream_code(paths, config, progress, known, later.files if later is not None else ())
    _add_findings(spans, findings)
    return spans if later is None else LateSpans(spans, later, _add_findings)


def _add_findings(spans: dict[str, list[Span]], findings: Sequence[Finding]) -> None:
    for finding in findings:
        if rule_by_code(finding.code) is not None:
            spans.setdefault(real(finding.path), []).append(finding.span)


def _find_stream_code(
    findings: Sequence[Finding],
    paths: Sequence[str],
    config: Config,
    settings: ConfirmSettings,
    known: Mapping[str, frozenset[int]] | None,
    later: LaterAnalyses | None,
) -> Mapping[str, list[Span]]:
    """`watched`, saying what it does: a line when the files to parse are known and one when
    done (CI logs see both), a bar in between on a terminal."""
    started = time.monotonic()
    bar = _ProgressBar("Finding stream code") if _show_progress(settings) else None

    def progress(done: int, total: int) -> None:
        if done == 0:
            found = sum(1 for lines in (known or {}).values() if lines) + len(later.files if later else ())
            reused = f"{found} from the static pass, " if known or later else ""
            _say(settings, f"Finding stream code: {reused}{total} file(s) to parse...")
        elif bar is not None:
            bar(done, total)

    try:
        spans = watched(findings, paths, config, progress, known, later)
    finally:
        if bar is not None:
            bar.close()
    _say(settings, f"Stream code in {len(spans)} file(s) ({time.monotonic() - started:.1f} s).")
    return spans


def main(
    findings: list[Finding],
    paths: list[str],
    config: Config,
    options: dict[str, Any],
    stream_code: Mapping[str, frozenset[int]] | None = None,
    all_findings: Callable[[], list[Finding]] | None = None,
    warm: WarmPython | None = None,
    later: LaterAnalyses | None = None,
) -> int:
    """The `--confirm` run over the stream code under `paths` and the findings of the static pass
    (`stream_code`: what it recognized as stream code, path -> lines, on its own trees).
    `all_findings`: the static pass's findings once its last checks are done, when `findings`
    lacks some that cannot choose tests (syntax checks left running while the tests start).
    `warm`: an interpreter started before the static pass, for the first pytest process.
    `later`: the files that hold stream code whose analysis the static pass has not finished:
    the tests start on their names, their findings come with `all_findings`."""
    started = time.monotonic()
    try:
        settings = resolve_settings(config, options)
    except ConfirmUsageError as error:
        return _error(str(error))
    try:
        baseline = load_baseline(settings.baseline) if settings.baseline else None
    except BaselineError as error:
        return _error(str(error))
    missing = missing_requirements()
    if missing:
        return _error(
            f"--confirm needs {', '.join(REQUIREMENTS)}; missing: {', '.join(missing)}. "
            f"Install them with: {INSTALL_HINT}"
        )
    spans = _find_stream_code(findings, paths, config, settings, stream_code, later)
    selection = Selection(test_files=(), reaching={})
    test_paths: list[str] = []
    if spans or settings.all_tests:
        try:
            test_paths, patterns = _test_paths(settings, paths)
            _say(settings, f"Selecting the tests that import it, among {_shown_paths(test_paths)}...")
            selection = select_tests(spans, test_paths, paths, patterns, all_tests=settings.all_tests)
        except SelectionError as error:
            return _error(str(error))
    result = RunResult(tests={}, races=[])
    unchecked: dict[str, TestRun] = {}
    device = None
    if selection.test_files:
        _say(
            settings,
            f"Running {len(selection.test_files)} test file(s) that reach stream code in {len(spans)} "
            f"file(s) under the sanitizer (device: {settings.device}, workers: {settings.workers})...",
        )
        progress = _ProgressBar() if _show_progress(settings) else None
        with tempfile.TemporaryDirectory(prefix="csan-confirm-") as workdir:
            run_settings = RunSettings(
                settings.device,
                settings.timeout,
                Path(workdir),
                settings.workers,
                settings.keyword,
                settings.trace_out,
                devices=settings.devices,
                warm=warm,
                facts=settings.save_facts is not None,
            )
            runner = Runner(run_settings, progress)
            try:
                result = runner.run(selection.test_files, spans)
            except RunError as error:
                return _error(f"could not run the tests: {error}")
            finally:
                if progress is not None:
                    progress.close()
            device = runner.device
            unchecked = _run_unchecked(settings, runner, result)
            if settings.save_facts is not None:
                _save_facts(Path(workdir), settings)
        if settings.trace_out:
            _say(
                settings,
                f"The sanitized run, drawn: {settings.trace_out} (ui.perfetto.dev or chrome://tracing opens it).",
            )
    elif spans:
        _say(settings, f"No test imports a module with stream code (looked in: {_shown_paths(test_paths)}).")
    else:
        _say(settings, "No stream code and no finding under the paths: no test to run.")
    if all_findings is not None:
        findings = all_findings()
    verdicts, runtime_only = decide(findings, result, selection.reaching, paths)
    verdicts, runtime_only, hidden = shown(verdicts, runtime_only, config, baseline)
    failures = failures_of(result, unchecked)
    elapsed = time.monotonic() - started
    if settings.output_format == "json":
        click.echo(
            format_json(
                verdicts,
                runtime_only,
                device=device,
                test_files=selection.test_files,
                tests=list(result.tests.values()),
                leaks=result.leaks,
                failures=failures,
                not_shown=summary_of(hidden),
            ),
            nl=False,
        )
    elif settings.output_format == "junit":
        click.echo(
            format_junit(verdicts, runtime_only, fail_on=settings.fail_on, device=device, failures=failures), nl=False
        )
    elif settings.output_format == "sarif":
        from csan_lint.runtime.confirm_sarif import format_confirm_sarif

        sarif = format_confirm_sarif(
            verdicts,
            runtime_only,
            fail_on=settings.fail_on,
            device=device,
            test_files=selection.test_files,
            tests=list(result.tests.values()),
            failures=failures,
            not_shown=summary_of(hidden),
        )
        click.echo(sarif, nl=False)
    else:
        click.echo(
            format_text(
                verdicts,
                runtime_only,
                verbose=settings.verbose,
                quiet=settings.quiet,
                run=result,
                seconds=elapsed,
                failures=failures,
                notes=hidden_line(hidden, settings.baseline),
            ),
            nl=False,
        )
    raced = any(entry.is_race for entry in runtime_only) or any(
        verdict.verdict in settings.fail_on for verdict in verdicts
    )
    return max(EXIT_FAILED if raced and not settings.exit_zero else EXIT_CLEAN, failures_status(failures))


def _run_unchecked(settings: ConfirmSettings, runner: Runner, result: RunResult) -> dict[str, TestRun]:
    """The failed tests once more without the sanitizer, to tell their own failures from ours."""
    failed = [test.nodeid for test in result.tests.values() if needs_unchecked_run(test)]
    if not failed:
        return {}
    _say(settings, f"Running the {len(failed)} failed test(s) again without the sanitizer...")
    return runner.unchecked(failed)
