"""Files that name no stream API but import a linted module with stream code are analysed,
with the package index: a call into that module is followed (lint/promote.py, the runner)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from csan_lint.lint.config import load_config
from csan_lint.lint.promote import imports_any, stream_definitions
from csan_lint.lint.runner import lint_paths

COMM = """
import torch


class Comm:
    def __init__(self):
        self.stream = torch.cuda.Stream()

    def send(self, tensor):
        with torch.cuda.stream(self.stream):
            out = tensor * 2
        torch.cuda.current_stream().wait_stream(self.stream)
        return out
"""
TRAIN = """
from {module} import Comm


def step(model, x):
    comm = Comm()
    y = model(x) * 3
    return comm.send(y)
"""


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from pkg.comm import Comm\n", True),
        ("from .comm import Comm\n", True),
        ("from . import comm\n", True),
        ("from .comm import (\n    helper,  # no stream code\n    Comm,\n)\n", True),
        ("import pkg.comm as c\n", True),
        ("from pkg import (\n    comm,\n)\n", True),
        ("from pkg.other import Comm\n", False),
        ("import torch\n# from pkg.comm import Comm\n", False),
    ],
)
def test_which_imports_may_name_a_module(source: str, found: bool) -> None:
    assert imports_any(source, "src/pkg/train.py", {"src.pkg.comm": frozenset({"Comm"})}) is found


def test_only_names_defined_with_stream_code_promote() -> None:
    """`from pkg.comm import helper`, where `helper` does nothing with streams: not analysed."""
    comm = COMM + "\n\ndef helper(x):\n    return x + 1\n"
    assert stream_definitions(comm) == {"Comm"}
    assert not imports_any("from pkg.comm import helper\n", "src/pkg/train.py", {"src.pkg.comm": frozenset({"Comm"})})


def _project(tmp_path: Path, module: str) -> Path:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "comm.py").write_text(COMM)
    (package / "train.py").write_text(textwrap.dedent(TRAIN.format(module=module)))
    return tmp_path


@pytest.mark.parametrize("module", ["pkg.comm", ".comm"])
@pytest.mark.parametrize("cache", [False, True])
def test_a_caller_naming_no_stream_api_is_reported_at_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, cache: bool
) -> None:
    root = _project(tmp_path, module)
    monkeypatch.chdir(root)
    config = load_config(["."])
    for _ in range(2 if cache else 1):  # the second run finds the files' results in the cache
        result = lint_paths(["pkg"], config, jobs=1, cache=cache)
        assert [(f.path, f.line, f.code) for f in result.findings] == [(os.path.join("pkg", "train.py"), 8, "CSL101")]


def test_a_file_cached_as_rejected_is_analysed_once_a_module_it_imports_has_stream_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path, "pkg.comm")
    monkeypatch.chdir(root)
    config = load_config(["."])
    comm = root / "pkg" / "comm.py"
    comm.write_text("class Comm:\n    def send(self, tensor):\n        return tensor\n")
    assert lint_paths(["pkg"], config, jobs=1, cache=True).findings == []
    comm.write_text(COMM)
    result = lint_paths(["pkg"], config, jobs=1, cache=True)
    assert [(f.line, f.code) for f in result.findings] == [(8, "CSL101")]
