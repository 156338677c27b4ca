"""`pip install csan-lint` without torch: the linter works, `--confirm` says what to install.

The installed `csan-lint` script runs in a process whose import system cannot see torch (a
`sitecustomize` on PYTHONPATH hides it from every finder), which is what a machine without
torch looks like to both `import torch` and `importlib.util.find_spec("torch")`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from csan_lint.runtime.confirm import INSTALL_HINT

SCRIPT = shutil.which("csan-lint") or str(Path(sys.executable).parent / "csan-lint")
HIDE_TORCH = '''\
import sys


class _HideTorch:
    """Wraps a finder; answers "not found" for torch and its submodules."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            return None
        find_spec = getattr(self.finder, "find_spec", None)
        return find_spec(name, path, target) if find_spec else None

    def __getattr__(self, attribute):
        return getattr(self.finder, attribute)


sys.meta_path[:] = [_HideTorch(finder) for finder in sys.meta_path]
'''
BUGGY = "import torch\n\n\ndef f(x, s):\n    y = x * 2\n    with torch.cuda.stream(s):\n        z = y + 1\n    return z\n"


@pytest.fixture
def no_torch(tmp_path: Path) -> dict[str, str]:
    """An environment for subprocesses in which torch is not installed, as far as they can tell."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_TORCH)
    (tmp_path / "mod.py").write_text(BUGGY)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _run(arguments: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(arguments, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_blocker_hides_torch(tmp_path: Path, no_torch: dict[str, str]) -> None:
    probe = "import importlib.util, sys; assert importlib.util.find_spec('torch') is None; import torch"
    done = _run([sys.executable, "-c", probe], tmp_path, no_torch)
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in done.stderr, done.stderr


def test_lint_works_without_torch(tmp_path: Path, no_torch: dict[str, str]) -> None:
    done = _run([SCRIPT, "mod.py"], tmp_path, no_torch)
    assert done.returncode == 1, done.stderr
    assert "mod.py:7:13: CSL101 " in done.stdout and done.stderr == ""


@pytest.mark.parametrize("output_format", ["text", "json", "junit"])
def test_confirm_without_torch_says_what_to_install(tmp_path: Path, no_torch: dict[str, str], output_format: str) -> None:
    done = _run([SCRIPT, "--confirm", "--format", output_format, "mod.py"], tmp_path, no_torch)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "error: --confirm needs torch, pytest, coverage; missing: torch." in done.stderr
    assert INSTALL_HINT in done.stderr
    assert "Traceback" not in done.stderr
