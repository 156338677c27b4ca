"""The pre-commit hook: its definition, and the real `pre-commit try-repo` against this checkout
(the hook's environment is built from it with `pip install .`, so it must not pull torch)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).parents[2]
HOOKS = ROOT / ".pre-commit-hooks.yaml"
BUGGY = """\
import torch


def f(x, s):
    y = x * 2
    with torch.cuda.stream(s):
        z = y + 1
    return z
"""


def test_hook_runs_the_installed_script_on_python_files() -> None:
    (hook,) = yaml.safe_load(HOOKS.read_text())
    script, *arguments = hook["entry"].split()
    assert hook["id"] == "csan-lint" and script == "csan-lint"
    assert arguments == ["check", "--force-exclude"], "exclude must keep a committed file out"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    assert hook["pass_filenames"] is True and hook["require_serial"] is False
    assert shutil.which(script) or (Path(sys.executable).parent / script).exists()


def _git(*arguments: str, cwd: Path) -> None:
    subprocess.run(["git", *arguments], cwd=cwd, check=True, capture_output=True)


def _installed(pip_log: Path) -> str:
    """The `Successfully installed ...` line of the pip run that built the hook's environment."""
    lines = [line for line in pip_log.read_text().splitlines() if "Successfully installed" in line]
    assert lines, pip_log.read_text()[-2000:]
    return lines[-1]


@pytest.mark.slow
def test_try_repo_fails_on_the_bug_and_passes_clean_code(tmp_path: Path) -> None:
    """Two `pre-commit try-repo` runs at once (each builds its own environment, ~30 s): one on
    the buggy file, one on the clean file and a buggy file that `exclude` leaves out. try-repo
    takes this checkout's tracked files, with their uncommitted changes, as a temporary commit."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of csan-lint")
    project = tmp_path / "project"
    project.mkdir()
    (project / "buggy.py").write_text(BUGGY)
    (project / "clean.py").write_text("import torch\n\nx = torch.zeros(3)\n")
    (project / "generated").mkdir()
    (project / "generated" / "buggy.py").write_text(BUGGY)
    (project / "pyproject.toml").write_text('[tool.csan-lint]\nexclude = ["generated/"]\n')
    _git("init", "-q", cwd=project)
    _git("add", "buggy.py", "clean.py", "generated/buggy.py", "pyproject.toml", cwd=project)
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    runs = {}
    for name, files in (("buggy.py", ["buggy.py"]), ("clean.py", ["clean.py", "generated/buggy.py"])):
        env = {
            **os.environ,
            **identity,
            "PRE_COMMIT_HOME": str(tmp_path / f"home-{name}"),
            "PIP_LOG": str(tmp_path / f"pip-{name}.log"),
            "PRE_COMMIT_COLOR": "never",
        }
        command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "csan-lint", "--files", *files]
        runs[name] = subprocess.Popen(
            command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    outputs = {name: run.communicate(timeout=600)[0] for name, run in runs.items()}

    failed = outputs["buggy.py"]
    assert runs["buggy.py"].returncode == 1, failed
    assert "csan-lint" in failed and "Failed" in failed
    assert "buggy.py:7:13: CSL101 'y' was written on the current stream" in failed

    passed = outputs["clean.py"]
    assert runs["clean.py"].returncode == 0, passed
    assert "Passed" in passed and "CSL" not in passed

    for name in runs:
        installed = _installed(tmp_path / f"pip-{name}.log")
        assert "csan-lint-" in installed or "csan_lint-" in installed
        assert "libcst-" in installed and "torch" not in installed
