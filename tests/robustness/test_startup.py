"""Start-up: a run imports only what it needs. pre-commit lints one or two files per commit, so
libcst (~0.5 s) loads only when a file must be parsed, the process pool only when there is much to
parse, and torch never. Checked on the real command with `python -X importtime`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from csan_lint.lint.registry import all_rules

FLAGGED = all_rules()[0].INVALID[0].code


def imported_modules(arguments: list[str], cwd: Path) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "csan_lint", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode in (0, 1), completed.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "plain.py").write_text("def add(x, y):\n    return x + y\n")
    (tmp_path / "stream.py").write_text(FLAGGED)
    return tmp_path


def test_a_file_the_prefilter_rejects_imports_no_parser(project: Path) -> None:
    modules = imported_modules(["--no-cache", "plain.py"], project)
    assert "csan_lint.lint.shell.runner" in modules  # the run did happen
    assert not {"libcst", "csan_lint.lint.engine", "concurrent.futures", "multiprocessing", "torch"} & modules


def test_one_file_to_parse_imports_libcst_but_no_process_pool(project: Path) -> None:
    modules = imported_modules(["--no-cache", "stream.py"], project)
    assert {"libcst", "csan_lint.lint.engine"} <= modules
    assert not {"concurrent.futures", "multiprocessing", "torch"} & modules


def test_a_warm_cache_hit_imports_no_parser(project: Path) -> None:
    imported_modules(["stream.py"], project)
    modules = imported_modules(["stream.py"], project)
    assert not {"libcst", "concurrent.futures", "multiprocessing", "torch"} & modules


def test_version_imports_neither_click_nor_the_linter(project: Path) -> None:
    modules = imported_modules(["--version"], project)
    assert "csan_lint" in modules  # the command did run
    assert not {"click", "csan_lint.lint.shell.cli", "csan_lint.lint.shell.config", "libcst", "torch"} & modules


def test_version_says_what_the_command_line_says(project: Path) -> None:
    """The early answer and click's `--version` (`csan-lint check --version`) agree."""
    from click.testing import CliRunner

    from csan_lint.lint.shell.cli import main

    command = [sys.executable, "-m", "csan_lint", "--version"]
    early = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert early.returncode == 0
    assert early.stdout == CliRunner().invoke(main, ["check", "--version"]).output
