"""Robustness soak: the checks of tests/robustness at full size, counted, written to
docs/robustness.md. The same workloads as the tests (tests/robustness/workloads.py), many more
examples:

- generated Python (hypothesmith, from the grammar; half with `import torch` on top) and generated
  stream-heavy PyTorch code through `lint_source`; generated projects through `lint_paths`,
  cold then warm from the cache, which must report what the engine reports;
- the hostile-file cases (tests/robustness/test_hostile_files.py), run by pytest;
- the sanitizer under four threads: a million engine events, and a million real torch ops on
  the emulated device, memory measured with tracemalloc.

    python benchmarks/fuzz_static.py [--scale 1.0] [--output docs/robustness.md]

`--scale 0.05` is a quick look (counts and sizes shrink; the report says what ran). Takes about
8 minutes at scale 1 on 2 idle cores (40 on busy ones), half of it in the million torch ops. Needs the test extra
(hypothesis, hypothesmith) and torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csan_lint import __version__
from csan_lint.lint.engine import lint_source
from csan_lint.lint.registry import SYNTAX_ERROR_CODE
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.runtime import kinds

REPOSITORY = Path(__file__).resolve().parent.parent
ROBUSTNESS_TESTS = REPOSITORY / "tests" / "robustness"
THREADS = 4


def load_workloads() -> ModuleType:
    """tests/robustness/conftest.py's loader (the workloads live with the tests)."""
    spec = importlib.util.spec_from_file_location("robustness_conftest", ROBUSTNESS_TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return conftest.load_workloads()


workloads = load_workloads()


@dataclass
class Outcome:
    check: str
    tried: int = 0
    survived: int = 0
    notes: list[str] = field(default_factory=list)
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Failure signature (exception and where) -> (count, the smallest input that gave it)."""
    seconds: float = 0.0

    def fail(self, signature: str, evidence: str) -> None:
        count, smallest = self.failures.get(signature, (0, evidence))
        self.failures[signature] = (count + 1, min(smallest, evidence, key=len))


def signature(error: BaseException) -> str:
    """`Type: message` and the innermost frames as file:line (function). No source lines: the
    file may have changed on disk since it was imported."""
    frames = traceback.extract_tb(error.__traceback__)[-3:]
    where = " < ".join(f"{Path(frame.filename).name}:{frame.lineno} ({frame.name})" for frame in reversed(frames))
    message = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}{': ' + message if message else ''} at {where}"


def fuzz(check: str, strategy: st.SearchStrategy[Any], examples: int, body: Callable[[Any], None]) -> Outcome:
    """Runs `body` on `examples` generated values; a failure is recorded (first lines of its
    traceback and the input) and generation goes on, so the counts are of every example."""
    outcome = Outcome(check)
    start = time.perf_counter()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value: Any) -> None:
        outcome.tried += 1
        try:
            body(value)
        except Exception as error:  # the point of a soak: count it, keep the input, go on
            outcome.fail(signature(error), str(value))
        else:
            outcome.survived += 1

    run()
    outcome.seconds = time.perf_counter() - start
    return outcome


def lint_generated(value: tuple[str, str]) -> None:
    prefix, source = value
    text = prefix + source
    workloads.check_findings(lint_source(text, "fuzz.py"), text, "fuzz.py")


def lint_stream_program(source: str) -> None:
    compile(source, "generated.py", "exec")
    findings = lint_source(source, "generated.py")
    assert not any(finding.code == SYNTAX_ERROR_CODE for finding in findings), findings
    workloads.check_findings(findings, source, "generated.py")


def lint_project(sources: list[str]) -> None:
    """Cold, then warm from the cache: both must be exactly the engine's findings, no tool error."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        paths = [root / f"m{index}.py" for index in range(len(sources))]
        for path, source in zip(paths, sources, strict=True):
            path.write_text(source)
        expected = sorted(
            (f.path, f.line, f.column, f.code)
            for path, source in zip(paths, sources, strict=True)
            for f in lint_source(source, str(path))
        )
        for _ in range(2):
            result = lint_paths([directory], Config(root=root), jobs=1, cache=True)
            assert not result.has_tool_errors, result.findings
            assert sorted((f.path, f.line, f.column, f.code) for f in result.findings) == expected


class _Outcomes:
    """A pytest plugin counting test outcomes."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.skipped: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.passed.append(report.nodeid)
        elif report.failed:
            self.failed.append(f"{report.nodeid}: {report.longreprtext[-1500:]}")
        elif report.skipped:
            self.skipped.append(report.nodeid)


def hostile_files() -> Outcome:
    outcome = Outcome("hostile files through the CLI (one pytest case each)")
    plugin = _Outcomes()
    start = time.perf_counter()
    pytest.main(
        ["-q", "-p", "no:cacheprovider", "--import-mode=importlib", str(ROBUSTNESS_TESTS / "test_hostile_files.py")],
        plugins=[plugin],
    )
    outcome.seconds = time.perf_counter() - start
    outcome.tried = len(plugin.passed) + len(plugin.failed)
    outcome.survived = len(plugin.passed)
    outcome.notes = [nodeid.split("::", 1)[1] for nodeid in plugin.passed]
    for failure in plugin.failed:
        outcome.fail(failure.split(":", 1)[0], failure)
    if plugin.skipped:
        outcome.notes.append(f"skipped: {', '.join(plugin.skipped)}")
    with tempfile.TemporaryDirectory() as directory:
        enforced = workloads.permissions_enforced(Path(directory))
    if not enforced:
        outcome.notes.append(
            "chmod 000 does not stop this user (root): the unreadable-file case fakes the permission error"
        )
    return outcome


def stress(check: str, run: Callable[[], Any], unit: str, expected_reports: list[str]) -> Outcome:
    """Survived: all of it, or nothing (one run): no internal error and exactly the expected
    report kinds."""
    outcome = Outcome(check)
    result = run()
    outcome.tried = result.operations
    reported = sorted({error.kind for error in result.errors})
    sound = not result.internal_errors and sorted(error.kind for error in result.errors) == expected_reports
    outcome.survived = result.operations if sound else 0
    outcome.seconds = result.seconds
    outcome.notes = [
        f"{result.operations:,} {unit} in {result.seconds:.1f} s"
        f" ({result.operations / result.seconds:,.0f}/s, under tracemalloc)",
        f"tracemalloc peak above the warm-up: {result.peak_bytes / 1024:,.0f} KiB;"
        f" kept after the run: {max(result.growth_bytes, 0) / 1024:,.1f} KiB",
        f"reports: {len(result.errors)} ({', '.join(reported) or 'none'}); engine state at the end: {result.stats}",
    ]
    for message in result.internal_errors:
        outcome.fail(f"internal error: {message.splitlines()[0][:200]}", message)
    if not result.internal_errors and not sound:
        outcome.fail("unexpected reports", f"expected {expected_reports}, got {sorted(e.kind for e in result.errors)}")
    return outcome


def render(outcomes: list[Outcome], scale: float, total_seconds: float) -> str:
    import torch

    lines = [
        "# Robustness, measured",
        "",
        "Generated by `python benchmarks/fuzz_static.py"
        + (f" --scale {scale}" if scale != 1.0 else "")
        + "` (do not edit by hand). The CI runs the same checks smaller: `pytest tests/robustness`.",
        "",
        f"csan-lint {__version__}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"{platform.system()} {platform.machine()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{total_seconds / 60:.1f} min in all.",
        "",
        "| check | tried | survived | seconds |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {o.check} | {o.tried:,} | {o.survived:,} | {o.seconds:.0f} |" for o in outcomes]
    lines += [
        "",
        "Survived: no exception, every finding located inside its file with a known code (a syntax",
        "error alone), generated stream code never reported as a syntax error, `lint_paths` (cold and",
        "warm cache) reporting exactly the engine's findings with no tool error; for the sanitizer, no",
        "internal error, and the expected reports only (one deduplicated race per thread for the engine",
        "load, none for the correct torch code).",
        "",
    ]
    for outcome in outcomes:
        if outcome.notes or outcome.failures:
            lines += [f"## {outcome.check}", ""]
            lines += [f"- {note}" for note in outcome.notes] + ([""] if outcome.notes else [])
            for failed, (count, smallest) in outcome.failures.items():
                lines += [
                    f"{count:,} failed with {failed}; the smallest input:",
                    "",
                    "```",
                    smallest[:3000].rstrip(),
                    "```",
                    "",
                ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count (0.05 for a quick look)")
    parser.add_argument("--output", type=Path, default=REPOSITORY / "docs" / "robustness.md")
    arguments = parser.parse_args()
    scale = arguments.scale

    def count(full: int) -> int:
        return max(int(full * scale), 1)

    start = time.perf_counter()
    outcomes = [
        fuzz(
            "hypothesmith sources through `lint_source`",
            st.tuples(st.sampled_from(["", "import torch\n"]), hypothesmith.from_grammar()),
            count(2000),
            lint_generated,
        ),
        fuzz(
            "stream-heavy generated modules through `lint_source`",
            workloads.stream_programs,
            count(5000),
            lint_stream_program,
        ),
        fuzz(
            "generated projects (1-4 modules) through `lint_paths`, cold and warm cache",
            st.lists(workloads.stream_programs, min_size=1, max_size=4),
            count(500),
            lint_project,
        ),
        hostile_files(),
        stress(
            f"sanitizer engine: events from {THREADS} threads",
            lambda: workloads.tracker_stress(THREADS, iterations=count(125_000)),
            "engine events",
            [kinds.WRITE_AFTER_READ] * THREADS,
        ),
        stress(
            f"sanitizer on the emulated device: torch ops from {THREADS} threads",
            lambda: workloads.torch_stress(THREADS, iterations=count(83_400)),
            "torch ops",
            [],
        ),
    ]
    for outcome in outcomes:
        print(f"{outcome.check}: {outcome.survived:,}/{outcome.tried:,} survived ({outcome.seconds:.0f} s)", flush=True)
    arguments.output.write_text(render(outcomes, scale, time.perf_counter() - start))
    print(f"wrote {arguments.output}")
    if any(outcome.survived < outcome.tried for outcome in outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
