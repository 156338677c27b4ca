"""The project index (lint/shell/project.py): a run given one file of a project follows its calls into
the project's other modules, kept across runs by stat and content hash; a change to a module
re-checks the files that looked it up, and only those. Also the language server's copy of it
(lint/shell/workspace.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint import streamflow
from csan_lint.lint.shell.cache import CACHE_DIR_NAME
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.shell.workspace import Workspace

COMM = textwrap.dedent(
    """\
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
)
COMM_FORKED = COMM.replace(
    "        with torch.cuda.stream(self.stream):",
    "        self.stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.stream):",
)
TRAIN = textwrap.dedent(
    """\
    import torch

    from pkg.comm import Comm


    def step(model, x):
        comm = Comm()
        y = model(x) * 3
        return comm.send(y)
    """
)
"""Names no stream API itself: only the index tells that `comm.send(y)` reads `y` on a side stream."""
SIDE = (
    "import torch\n\n\ndef f(x, s):\n    y = x * 2\n    with torch.cuda.stream(s):\n        z = y + 1\n    return z\n"
)
"""A flagged file that imports nothing of the project."""


def _project(root: Path, marker: bool = True) -> Path:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "comm.py").write_text(COMM)
    (root / "pkg" / "train.py").write_text(TRAIN)
    (root / "pkg" / "side.py").write_text(SIDE)
    if marker:
        (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    return root


def _age(path: Path, seconds: float = 60) -> None:
    """Old enough for a stat (a directory's listing) to be trusted."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns - int(seconds * 1e9)))


def _age_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            _age(Path(directory) / name)
        _age(Path(directory))


def _check(*arguments: str) -> list[tuple[str, int, str]]:
    result = CliRunner().invoke(main, ["--output-format", "json", *arguments])
    assert result.exit_code in (0, 1), result.output
    return [(f["path"], f["line"], f["code"]) for f in json.loads(result.output)["findings"]]


@pytest.fixture
def summarised(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Texts of the other modules parsed to summarise their functions."""
    parsed: list[str] = []
    real = streamflow.module_helpers
    monkeypatch.setattr(streamflow, "module_helpers", lambda source: parsed.append(source) or real(source))
    return parsed


@pytest.mark.parametrize("cache", [True, False])
def test_a_one_file_run_follows_a_call_into_an_unchanged_module_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    flagged = [(os.path.join("pkg", "train.py"), 9, "CSL101")]
    assert _check(*([] if cache else ["--no-cache"]), "pkg/train.py") == flagged
    assert [finding for finding in _check("--no-cache", "pkg") if "train" in finding[0]] == flagged


def test_outside_a_project_a_one_file_run_sees_that_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No pyproject.toml, .git nor config: the working directory is not walked."""
    monkeypatch.chdir(_project(tmp_path, marker=False))
    assert _check("pkg/train.py") == []
    assert not list((tmp_path / CACHE_DIR_NAME).glob("index-*.json"))


def test_editing_the_helper_changes_the_one_file_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parse_count: list[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    _age_tree(tmp_path)
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    parse_count.clear()
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    assert parse_count == []  # warm: nothing changed, nothing parsed
    (tmp_path / "pkg" / "comm.py").write_text(COMM_FORKED)
    assert _check("pkg/train.py") == []
    assert parse_count == [os.path.join("pkg", "train.py")]  # re-checked because its helper changed
    (tmp_path / "pkg" / "comm.py").write_text(COMM)
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]


def test_editing_a_helper_relints_its_importers_not_every_parsed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parse_count: list[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    config = load_config(["."])
    lint_paths(["."], config, jobs=1, cache=True)
    (tmp_path / "pkg" / "comm.py").write_text(COMM_FORKED)
    parse_count.clear()
    lint_paths(["."], config, jobs=1, cache=True)
    assert sorted(parse_count) == [os.path.join("pkg", "comm.py"), os.path.join("pkg", "train.py")]


def test_a_warm_run_parses_only_the_changed_file_not_the_modules_it_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parse_count: list[str], summarised: list[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    assert summarised == [COMM]
    summarised.clear()
    parse_count.clear()
    (tmp_path / "pkg" / "train.py").write_text(TRAIN + "\n# edited\n")
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    assert parse_count == [os.path.join("pkg", "train.py")] and summarised == []  # comm's summary was kept


def test_a_module_added_later_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index trusts an unchanged directory listing; adding a file changes its directory."""
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "pkg" / "comm.py").unlink()
    _age_tree(tmp_path)
    assert _check("pkg/train.py") == []
    _age_tree(tmp_path)
    (tmp_path / "pkg" / "comm.py").write_text(COMM)
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]


def test_a_corrupt_index_or_summary_file_is_a_miss_never_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    expected = _check("pkg/train.py")
    cache = tmp_path / CACHE_DIR_NAME
    (index,) = cache.glob("index-*.json")
    (summaries,) = cache.glob("summaries-*/*.json")
    (results,) = cache.glob("results-*.json")
    document = json.loads(index.read_text())
    for garbage in (
        "{not json",
        json.dumps({**document, "modules": {str(tmp_path / "pkg" / "comm.py"): [None, 3, True, "Comm"]}}),
        json.dumps({**document, "modules": {str(tmp_path / "pkg" / "comm.py"): [None, "ab", True, "Comm"]}}),
        json.dumps({**document, "tree": {"dirs": {str(tmp_path): "old"}, "ignores": {}}}),
        json.dumps({**document, "tree": []}),
    ):
        index.write_text(garbage)
        summaries.write_text('{"Comm.send": {"params": 1}}')
        results.unlink(missing_ok=True)
        assert _check("pkg/train.py") == expected
    assert json.loads(index.read_text())["format"] == document["format"]  # written whole again
    assert json.loads(summaries.read_text())["Comm.send"]["params"] == ["tensor"]


def test_concurrent_one_file_and_whole_runs_share_the_index(tmp_path: Path) -> None:
    root = _project(tmp_path)
    for number in range(20):
        (root / "pkg" / f"m{number:02}.py").write_text(SIDE if number % 2 else TRAIN)
    expected = subprocess.run(
        [sys.executable, "-m", "csan_lint", "--no-cache", "pkg/train.py"], capture_output=True, text=True, cwd=root
    )
    assert "CSL101" in expected.stdout
    for _ in range(2):  # cold (every run writing), then warm
        commands = [["pkg/train.py"], ["pkg/train.py"], ["."]]
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "csan_lint", *arguments],
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for arguments in commands
        ]
        outputs = [run.communicate(timeout=180) for run in runs]
        assert [errors for _, errors in outputs] == ["", "", ""]
        assert [output for output, _ in outputs[:2]] == [expected.stdout] * 2
        assert outputs[2][0].count(": CSL101 ") == 22  # train.py and side.py, 10 copies of each
        (index,) = (root / CACHE_DIR_NAME).glob("index-*.json")
        assert len(json.loads(index.read_text())["modules"]) == 24
    assert not [path for path in (root / CACHE_DIR_NAME).rglob("*.tmp")]


def test_the_language_server_keeps_the_index_and_rechecks_dependents(tmp_path: Path) -> None:
    root = _project(tmp_path)
    workspace = Workspace()
    train, comm = root / "pkg" / "train.py", root / "pkg" / "comm.py"
    config = load_config([str(train)])
    assert [f.code for f in workspace.lint(train, TRAIN, config)] == ["CSL101"]
    assert workspace.dependents(comm) == [train]
    workspace.lint(comm, COMM_FORKED, config)  # an unsaved edit of the helper
    assert workspace.lint(train, TRAIN, config) == []
    comm.unlink()  # the index is not read again: the editor's text stands for the module
    assert workspace.lint(train, TRAIN, config) == []
    workspace.closed(comm)  # closed (and gone on disk): the module leaves the index
    assert workspace.lint(train, TRAIN, config) == []
    comm.write_text(COMM)
    workspace.lint(comm, COMM, config)
    assert [f.code for f in workspace.lint(train, TRAIN, config)] == ["CSL101"]


def test_a_file_the_project_ignores_is_linted_without_its_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file named from an ignored folder (a checkout kept inside the project) is not the
    project's: its imports are not resolved against the project's modules."""
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / ".gitignore").write_text("/vendored/\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "train.py").write_text(TRAIN)
    assert _check("vendored/train.py") == []
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    _check("pkg/train.py", "vendored/train.py")  # a run naming both: the ignored one is not indexed
    (index,) = (tmp_path / CACHE_DIR_NAME).glob("index-*.json")
    modules = json.loads(index.read_text())["modules"]
    assert str(tmp_path / "pkg" / "train.py") in modules and str(tmp_path / "vendored" / "train.py") not in modules


def test_a_module_that_makes_an_import_ambiguous_rechecks_its_importers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parse_count: list[str]
) -> None:
    """`pkg.comm` named two modules: the import is left unresolved, so the cached finding that
    rested on it must go."""
    monkeypatch.chdir(_project(tmp_path))
    assert [code for _, _, code in _check("pkg/train.py")] == ["CSL101"]
    (tmp_path / "vendor" / "pkg").mkdir(parents=True)
    (tmp_path / "vendor" / "pkg" / "comm.py").write_text(COMM)
    parse_count.clear()
    assert _check("pkg/train.py") == []
    assert parse_count == [os.path.join("pkg", "train.py")]
