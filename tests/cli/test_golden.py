"""The CLI's whole output (stdout, stderr, exit code) on fixture trees, compared with goldens;
plus one smoke run of the installed `csan-lint` script and of `python -m csan_lint`."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell.cli import main

CASES = Path(__file__).parent / "cases"


def _materialise(tree: Path, destination: Path) -> None:
    """Copy a case's tree, turning `dot-x` path parts into `.x`."""
    for source in sorted(tree.rglob("*")):
        if source.is_file():
            parts = [f".{part[4:]}" if part.startswith("dot-") else part for part in source.relative_to(tree).parts]
            target = destination.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def render(exit_code: int, stdout: str, stderr: str, tmp: Path) -> str:
    text = f"exit: {exit_code}\n----- stdout -----\n{stdout}----- stderr -----\n{stderr}"
    return text.replace(str(tmp), "[TMP]")


@pytest.mark.parametrize("case", sorted(path.name for path in CASES.iterdir() if path.is_dir()))
def test_golden(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, update_golden: bool) -> None:
    directory = CASES / case
    if (directory / "tree").is_dir():
        _materialise(directory / "tree", tmp_path)
    monkeypatch.chdir(tmp_path)
    arguments = shlex.split((directory / "cmd").read_text())
    stdin = directory / "stdin"
    result = CliRunner().invoke(main, arguments, input=stdin.read_text() if stdin.is_file() else None)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    actual = render(result.exit_code, result.stdout, result.stderr, tmp_path)
    expected_file = directory / "expected"
    if update_golden:
        expected_file.write_text(actual)
    assert actual == expected_file.read_text()


@pytest.mark.parametrize(
    "command",
    [
        [shutil.which("csan-lint") or str(Path(sys.executable).parent / "csan-lint")],
        [sys.executable, "-m", "csan_lint"],
    ],
    ids=["script", "module"],
)
def test_installed_entry_points(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("import torch\nwith torch.cuda.stream(s)\n    pass\n")
    completed = subprocess.run([*command, "."], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout.startswith("broken.py:2:")
    assert " CSL001 syntax error" in completed.stdout
    assert completed.stdout.endswith("Found 1 finding in 1 file.\n")
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("csan-lint, version ")
