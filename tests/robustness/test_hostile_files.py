"""Inputs a linter meets in real trees: each gives a clear located diagnostic (or, where there is
nothing wrong, none) and every other file is still linted, through the CLI. Not repeated here
(already tested elsewhere): a file that is not UTF-8 and a path that does not exist
(tests/cli/test_runner.py::test_unreadable_input_is_located_and_the_rest_is_linted, the golden
case tests/cli/cases/unreadable), an unreadable directory (tests/lint/test_files.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import csan_lint_robustness_workloads as workloads  # loaded by this directory's conftest.py
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.runner import MAX_PARSE_CHARS

FLAGGED = all_rules()[0].INVALID[0].code


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "z_flagged.py").write_text(FLAGGED)
    return tmp_path


def run(*arguments: str) -> tuple[int, list[str]]:
    """Exit code and output lines (without `help:` lines), cache off: each case on its own."""
    result = CliRunner().invoke(main, ["--no-cache", *arguments])
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.stdout.splitlines() if not line.startswith("    help:")]


def flagged_still_linted(lines: list[str]) -> bool:
    return any(line.startswith("z_flagged.py:") for line in lines)


def test_an_empty_file_is_clean(project: Path) -> None:
    (project / "empty.py").write_bytes(b"")
    code, lines = run(".")
    assert code == 1 and flagged_still_linted(lines)
    assert not any(line.startswith("empty.py") for line in lines)


def test_a_huge_file_to_parse_is_reported_not_parsed(project: Path) -> None:
    (project / "huge.py").write_text(workloads.huge_source())
    assert (project / "huge.py").stat().st_size >= workloads.HUGE_BYTES > MAX_PARSE_CHARS
    code, lines = run(".")
    assert code == 2 and flagged_still_linted(lines)
    assert any(line.startswith("huge.py:1:1: CSL003 file too large to analyse: 10.0 MiB") for line in lines), lines


def test_a_huge_file_the_prefilter_rejects_is_read_and_clean(project: Path) -> None:
    (project / "table.py").write_text("TABLE = [\n" + "    (1, 2, 3),\n" * (workloads.HUGE_BYTES // 14) + "]\n")
    code, lines = run(".")
    assert code == 1 and flagged_still_linted(lines)
    assert not any(line.startswith("table.py") for line in lines)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (bytes(range(256)) * 8, "binary.py:2:118: CSL003 cannot decode file as utf-8: invalid start byte"),
        (b"\x00\x01\x02torch.cuda.stream(s)\n", "binary.py:1:1: CSL001 syntax error"),
        (b"\xca\xfe\xba\xbe\x00\x00\x00\x02" * 16, "binary.py:1:1: CSL003 cannot decode file"),
    ],
    ids=["all-bytes", "nul-bytes-decodable", "magic-number"],
)
def test_a_binary_file_named_py_is_a_located_diagnostic(project: Path, data: bytes, expected: str) -> None:
    (project / "binary.py").write_bytes(data)
    code, lines = run(".")
    assert flagged_still_linted(lines)
    assert any(line.startswith(expected) for line in lines), lines
    assert code in (1, 2)


def test_an_unreadable_file_is_reported(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = project / "locked.py"
    locked.write_text(FLAGGED)
    if workloads.permissions_enforced(project):
        locked.chmod(0)
    else:  # root (CI here) reads through chmod 000: make the read fail as it would for a user
        real_read_bytes = Path.read_bytes

        def read_bytes(path: Path) -> bytes:
            if path.name == "locked.py":
                raise PermissionError(13, "Permission denied", str(path))
            return real_read_bytes(path)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
    try:
        code, lines = run(".")
    finally:
        locked.chmod(0o644)
    assert code == 2 and flagged_still_linted(lines)
    assert "locked.py:1:1: CSL003 cannot read file: Permission denied" in lines


def test_symlink_loops_and_dangling_links_are_reported(project: Path) -> None:
    (project / "loop.py").symlink_to("loop.py")
    (project / "ping.py").symlink_to("pong.py")
    (project / "pong.py").symlink_to("ping.py")
    (project / "dangling.py").symlink_to("nowhere.py")
    (project / "pkg").mkdir()
    (project / "pkg" / "up").symlink_to("..", target_is_directory=True)  # a directory loop: not followed
    code, lines = run(".")
    assert code == 2 and flagged_still_linted(lines)
    assert [line for line in lines if " CSL003 " in line] == [
        "dangling.py:1:1: CSL003 broken symbolic link: its target does not exist",
        "loop.py:1:1: CSL003 symbolic link loop: the link never leads to a file",
        "ping.py:1:1: CSL003 symbolic link loop: the link never leads to a file",
        "pong.py:1:1: CSL003 symbolic link loop: the link never leads to a file",
    ]
    code, lines = run("loop.py", "z_flagged.py")  # named on the command line: the same words
    assert "loop.py:1:1: CSL003 symbolic link loop: the link never leads to a file" in lines


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_on_the_command_line_is_not_read(project: Path) -> None:
    """Reading it would block for ever (pre-commit passes whatever git lists)."""
    os.mkfifo(project / "pipe.py")
    code, lines = run("pipe.py", ".")
    assert code == 2 and flagged_still_linted(lines)
    assert "pipe.py:1:1: CSL003 not a regular file (a FIFO, socket or device): not read" in lines
