"""Permission errors for real, as a user who is not root: an unreadable file or directory,
named or met while walking, is a located CSL003 and everything else is still linted.

root reads everything, so when the suite runs as root the command runs in a child that drops to
`nobody` once it has imported what the run needs (the interpreter may live where `nobody` cannot
read, such as /root); the tree lives in a world-readable temporary directory for it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from csan_lint.lint.registry import all_rules

FLAGGED = all_rules()[0].INVALID[0].code


AS_NON_ROOT = f"""\
import os, shutil, sys  # shutil: click imports it lazily to format errors
from csan_lint.lint import engine
from csan_lint.lint.shell import cli, output, runner  # cli imports these when a command runs
engine.lint_source({FLAGGED!r}, "warm.py")  # imports libcst and every rule while still root
if os.getuid() == 0:
    os.setgroups([])
    os.setgid({pwd.getpwnam("nobody").pw_gid})
    os.setuid({pwd.getpwnam("nobody").pw_uid})
code = sys.argv.pop(1)
exec(code) if code else cli.main(sys.argv[1:], prog_name="csan-lint")
"""


@pytest.fixture
def tree() -> Iterator[Path]:
    """good.py (flagged), secret.py (mode 000), locked/ (000), blind/ (readable, not searchable)."""
    root = Path(tempfile.mkdtemp(prefix="csan-permissions-"))
    root.chmod(0o755)
    (root / "good.py").write_text(FLAGGED)
    (root / "secret.py").write_text(FLAGGED)
    for name in ("locked", "blind"):
        (root / name).mkdir()
        (root / name / "inner.py").write_text(FLAGGED)
    (root / "good.py").chmod(0o644)
    (root / "secret.py").chmod(0o000)
    (root / "locked").chmod(0o000)
    (root / "blind").chmod(0o644)
    yield root
    for name in ("locked", "blind"):
        (root / name).chmod(0o755)
    shutil.rmtree(root)


def _as_nobody(arguments: list[str], cwd: Path, code: str = "") -> subprocess.CompletedProcess[str]:
    """`csan-lint ARGUMENTS` (or the Python `code`) run by `nobody` in `cwd`."""
    return subprocess.run(
        [sys.executable, "-c", AS_NON_ROOT, code, *arguments],
        cwd=cwd,
        env={**os.environ, "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _reported(stdout: str) -> set[tuple[str, str]]:
    return {(line.split(":")[0], line.split(": ", 1)[1].split()[0]) for line in stdout.splitlines() if ": CSL" in line}


def test_the_child_really_cannot_read(tree: Path) -> None:
    probe = _as_nobody([], tree, "print(os.getuid() != 0); open('secret.py')")
    assert probe.stdout == "True\n" and "PermissionError" in probe.stderr, probe.stderr


@pytest.mark.slow
def test_unreadable_paths_met_while_walking(tree: Path) -> None:
    done = _as_nobody(["--no-cache", "."], tree)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stdout + done.stderr
    assert "secret.py:1:1: CSL003 cannot read file: Permission denied" in done.stdout
    assert "locked:1:1: CSL003 cannot read directory: Permission denied" in done.stdout
    assert "blind/inner.py:1:1: CSL003 cannot read file: Permission denied" in done.stdout  # listed, not opened
    assert ("good.py", "CSL101") in _reported(done.stdout)


@pytest.mark.slow
def test_unreadable_paths_named_on_the_command_line(tree: Path) -> None:
    done = _as_nobody(["--no-cache", "secret.py", "locked", "blind/inner.py", "good.py"], tree)
    assert done.returncode == 2, done.stderr
    assert "is not readable" not in done.stderr
    assert "secret.py:1:1: CSL003 cannot read file: Permission denied" in done.stdout
    assert "locked:1:1: CSL003 cannot read directory: Permission denied" in done.stdout
    assert "blind/inner.py:1:1: CSL003 cannot access: Permission denied" in done.stdout
    assert ("good.py", "CSL101") in _reported(done.stdout)
