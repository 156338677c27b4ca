"""The pre-commit hook definition matches what pre-commit needs to run the static check."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

HOOKS = Path(__file__).parents[2] / ".pre-commit-hooks.yaml"


def test_hook_runs_the_installed_script_on_python_files() -> None:
    (hook,) = yaml.safe_load(HOOKS.read_text())
    assert hook["id"] == "csan-lint" and hook["entry"] == "csan-lint"
    assert hook["language"] == "python" and hook["types"] == ["python"]
    assert hook["pass_filenames"] is True and hook["require_serial"] is False
    assert shutil.which(hook["entry"]) or (Path(sys.executable).parent / hook["entry"]).exists()
