"""The progress bar: drawn on a terminal's stderr for long runs, never in machine formats."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell import cli


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_draws_on_a_terminal_once_there_is_enough_work(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    short = cli._ProgressBar()
    for done in range(1, cli.PROGRESS_MIN_FILES):
        short(done, cli.PROGRESS_MIN_FILES - 1)
    short.close()
    assert terminal.getvalue() == ""

    long = cli._ProgressBar()
    total = cli.PROGRESS_MIN_FILES * 2
    for done in range(1, total + 1):
        long(done, total)
    long.close()
    assert "Linting" in terminal.getvalue() and "100%" in terminal.getvalue()


def test_no_bar_and_no_label_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    bar = cli._ProgressBar()
    total = cli.PROGRESS_MIN_FILES * 2
    for done in range(1, total + 1):
        bar(done, total)
    bar.close()
    assert log.getvalue() == ""


@pytest.mark.parametrize(
    ("arguments", "drawn"),
    [([], True), (["--format", "json"], False), (["--format", "sarif"], False), (["-q"], False)],
)
def test_machine_formats_never_get_a_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: list[str], drawn: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flagged.py").write_text(all_rules()[0].INVALID[0].code)
    made: list[object] = []

    class Recording(cli._ProgressBar):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(cli, "_ProgressBar", Recording)
    CliRunner().invoke(cli.main, [*arguments, "--no-cache", "."])
    assert bool(made) == drawn
