"""Methods of classes imported from another linted module: `comm = Comm()` (or
`self.comm = Comm()`) with `Comm` from `pkg.comm`, then `comm.send(y)`: the method's summary,
built in its own module, is replayed at the call as for a class of the module. A caller that
names no stream API is analysed all the same when it imports such a class (lint/shell/promote.py,
the runner)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.promote import imports_any, stream_definitions
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.summaries import PackageIndex

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
COMM_FORKED = COMM.replace(
    "        with torch.cuda.stream(self.stream):",
    "        self.stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.stream):",
)


def findings(caller: str, comm: str = COMM) -> list[tuple[str, int]]:
    package = PackageIndex.build([("src/pkg/comm.py", comm), ("src/pkg/train.py", caller)])
    found = lint_source(textwrap.dedent(caller), "src/pkg/train.py", package=package)
    return sorted((f.code, f.line) for f in found)


LOCAL = """
import torch

from pkg.comm import Comm


def step(model, x):
    comm = Comm()
    y = model(x) * 3
    return comm.send(y)
"""

ON_SELF = """
import torch

from pkg.comm import Comm


class Trainer:
    def __init__(self):
        self.comm = Comm()

    def step(self, model, x):
        y = model(x) * 3
        return self.comm.send(y)
"""


def test_a_side_stream_read_in_an_imported_method_is_reported_at_the_call() -> None:
    assert findings(LOCAL) == [("CSL101", 10)]


def test_through_an_attribute_bound_in_the_constructor() -> None:
    assert findings(ON_SELF) == [("CSL101", 13)]


def test_a_method_that_forks_its_stream_first_is_clean() -> None:
    assert findings(LOCAL, COMM_FORKED) == []


def test_without_the_other_module_nothing_is_known() -> None:
    assert lint_source(textwrap.dedent(LOCAL), "src/pkg/train.py") == []


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
        ("from . import comm\n", False),
        ("from .comm import (\n    helper,  # no stream code\n    Comm,\n)\n", True),
        ("import pkg.comm as c\n", False),
        ("from pkg import (\n    Comm,\n)\n", False),
        ("from pkg.comm import (\n    Comm,\n)\n", True),
        ("from pkg.other import Comm\n", False),
        ("import torch\n# from pkg.comm import Comm\n", False),
    ],
)
def test_which_imports_may_name_a_module(source: str, found: bool) -> None:
    assert imports_any(source, "src/pkg/train.py", {"src.pkg.comm": frozenset({"Comm"})}) is found


def test_torchs_own_modules_promote_nothing() -> None:
    """What torch's stream API does is the table's: importing it is no reason to parse a file."""
    assert not imports_any("from torch.cuda import stream\n", "torch/x.py", {"torch.cuda": frozenset({"stream"})})


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
