"""A small project with findings of two rules, a clean file and a file that does not parse."""

from __future__ import annotations

from pathlib import Path

import pytest

BUGGY = """\
import torch


def f(x, s):
    y = x * 2
    with torch.cuda.stream(s):
        z = y + 1
    return z
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "buggy.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("import torch\nwith torch.cuda.stream(s)\n    pass\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path
