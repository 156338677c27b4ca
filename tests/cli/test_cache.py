"""The results cache: what hits, what invalidates it, what it survives. Sources with findings are
the rules' own INVALID examples; `parse_count` counts the files that actually reach the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.model import NO_SPELLINGS
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell import cache, runner
from csan_lint.lint.shell.cache import CACHE_DIR_NAME
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.config import Config, load_config
from csan_lint.lint.shell.runner import INTERNAL_ERROR_CODE, lint_paths

FLAGGED = [example.code for rule in all_rules() for example in rule.INVALID]
PLAIN = "def f(x):\n    return x + 1\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(FLAGGED[0])
    (tmp_path / "b.py").write_text(FLAGGED[1])
    (tmp_path / "plain.py").write_text(PLAIN)
    return tmp_path


def _age(path: Path, seconds: float = 60) -> None:
    """Make a file old enough for its stat to be trusted (a just-written one is hashed instead)."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns - int(seconds * 1e9)))


def _cache_files(root: Path) -> list[Path]:
    return sorted((root / CACHE_DIR_NAME).glob("results-*.json"))


def test_a_warm_run_parses_nothing_and_reports_the_same(project: Path, parse_count: list[str]) -> None:
    config = Config(root=project)
    cold = lint_paths(["."], config, jobs=1, cache=True)
    assert sorted(parse_count) == ["a.py", "b.py"] and cold.files_cached == 0
    parse_count.clear()
    warm = lint_paths(["."], config, jobs=1, cache=True)
    assert parse_count == []
    assert warm.files_cached == 3
    assert (warm.findings, warm.files_checked, warm.files_parsed) == (
        cold.findings,
        cold.files_checked,
        cold.files_parsed,
    )
    # Fields a finding's equality leaves out come back too (--fix and the reports use them).
    assert [(f.edits, f.fix_safety) for f in warm.findings] == [(f.edits, f.fix_safety) for f in cold.findings]
    assert any(f.edits for f in cold.findings)
    assert cold.findings and {finding.path for finding in cold.findings} == {"a.py", "b.py"}


def test_paths_are_shown_from_the_current_directory_not_the_cached_one(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config(root=project)
    lint_paths(["a.py"], config, cache=True)
    monkeypatch.chdir(project.parent)
    warm = lint_paths([str(project / "a.py")], config, cache=True)
    assert warm.files_cached == 1
    assert {finding.path for finding in warm.findings} == {f"{project.name}/a.py"}


def test_changed_content_is_relinted(project: Path, parse_count: list[str]) -> None:
    config = Config(root=project)
    lint_paths(["."], config, jobs=1, cache=True)
    parse_count.clear()
    (project / "a.py").write_text(PLAIN)
    (project / "plain.py").write_text(FLAGGED[0])
    warm = lint_paths(["."], config, jobs=1, cache=True)
    # b.py is unchanged and looks up no module that changed: its cached findings stand.
    assert sorted(parse_count) == ["plain.py"]
    assert {finding.path for finding in warm.findings} == {"b.py", "plain.py"}
    parse_count.clear()
    (project / "a.py").write_text(PLAIN + "# still nothing to parse\n")
    assert lint_paths(["."], config, jobs=1, cache=True).findings == warm.findings
    assert parse_count == []  # a file the prefilter rejects changes no other file's findings


HELPERS = """\
import torch


def join(side):
    torch.cuda.current_stream().wait_stream(side)
"""
TRAIN = """\
import torch
from pkg.helpers import join


def step(x, s):
    with torch.cuda.stream(s):
        y = x * 2
    join(s)
    return y + 1
"""


def test_editing_an_imported_helper_relints_its_importer(project: Path) -> None:
    """Calls into other linted modules are followed: a warm run must see the helper change."""
    (project / "pkg").mkdir()
    (project / "pkg" / "helpers.py").write_text(HELPERS)
    (project / "pkg" / "train.py").write_text(TRAIN)
    config = Config(root=project)
    cold = lint_paths(["pkg"], config, cache=True)
    assert not [f for f in cold.findings if f.code == "CSL102"]
    (project / "pkg" / "helpers.py").write_text(HELPERS.replace("wait_stream(side)", "synchronize  # no wait"))
    warm = lint_paths(["pkg"], config, cache=True)
    assert [f.path for f in warm.findings if f.code == "CSL102"] == ["pkg/train.py"]
    assert warm == lint_paths(["pkg"], config, cache=False)


def test_a_change_within_the_same_mtime_and_size_is_seen(project: Path, parse_count: list[str]) -> None:
    """A file written just before the run is hashed next time, not trusted by its stat."""
    config = Config(root=project)
    target = project / "a.py"
    lint_paths(["a.py"], config, jobs=1, cache=True)
    before = target.stat()
    same_size = FLAGGED[0].replace("torch.cuda.stream", "torch.cuda.strean")
    assert len(same_size) == len(FLAGGED[0])
    target.write_text(same_size)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert lint_paths(["a.py"], config, jobs=1, cache=True).findings == []


def test_an_old_file_is_trusted_by_its_stat_and_a_touched_one_by_its_hash(
    project: Path, parse_count: list[str]
) -> None:
    config = Config(root=project)
    _age(project / "a.py")
    lint_paths(["a.py"], config, jobs=1, cache=True)
    entry = json.loads(_cache_files(project)[0].read_text())["entries"][str(project / "a.py")]
    assert entry["stat"] == [(project / "a.py").stat().st_mtime_ns, (project / "a.py").stat().st_size]
    (project / "a.py").touch()  # new mtime, same bytes: a hash hit, no parse
    parse_count.clear()
    warm = lint_paths(["a.py"], config, jobs=1, cache=True)
    assert parse_count == [] and warm.files_cached == 1 and warm.findings


def test_rule_selection_and_per_file_ignores_are_part_of_the_key(project: Path, parse_count: list[str]) -> None:
    """Per-file ignores choose the rules run on a file, so they apply before caching."""
    codes = {finding.code for finding in lint_paths(["a.py"], Config(root=project), cache=True).findings}
    code = min(codes)
    ignoring = lint_paths(["a.py"], Config(root=project, per_file_ignores={"a.py": (code,)}), cache=True)
    assert code not in {finding.code for finding in ignoring.findings} and ignoring.files_cached == 0
    selecting = lint_paths(["a.py"], Config(root=project, select=(code,)), cache=True)
    assert {finding.code for finding in selecting.findings} == {code} and selecting.files_cached == 0
    again = lint_paths(["a.py"], Config(root=project, ignore=(code,)), cache=True)
    assert code not in {finding.code for finding in again.findings}
    assert len(_cache_files(project)) == 4
    parse_count.clear()
    assert lint_paths(["a.py"], Config(root=project), cache=True).files_cached == 1
    assert parse_count == []


def test_a_new_version_starts_a_fresh_cache(
    project: Path, monkeypatch: pytest.MonkeyPatch, parse_count: list[str]
) -> None:
    lint_paths(["a.py"], Config(root=project), cache=True)
    monkeypatch.setattr(cache, "__version__", "999.0")
    parse_count.clear()
    assert lint_paths(["a.py"], Config(root=project), cache=True).files_cached == 0
    assert parse_count == ["a.py"]


def test_an_edited_rule_source_starts_a_fresh_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install changes the analysis without changing the version."""
    first = cache.settings_key(Config(root=project))
    monkeypatch.setattr(cache, "_source_fingerprint", lambda: "edited")
    assert cache.settings_key(Config(root=project)) != first


@pytest.mark.parametrize(
    "damage",
    [b"", b'{"entries": {', b"\x00\xff garbage", b"[1, 2]", b'{"entries": 7}'],
    ids=["empty", "truncated", "binary", "wrong-shape", "wrong-entries"],
)
def test_a_corrupt_cache_file_is_a_miss_and_is_rewritten(project: Path, damage: bytes) -> None:
    config = Config(root=project)
    cold = lint_paths(["."], config, cache=True)
    _cache_files(project)[0].write_bytes(damage)
    warm = lint_paths(["."], config, cache=True)
    assert warm.files_cached == 0 and warm.findings == cold.findings
    assert lint_paths(["."], config, cache=True).files_cached == 3


def test_a_corrupt_entry_is_a_miss_for_that_file_only(project: Path, parse_count: list[str]) -> None:
    config = Config(root=project)
    for name in ("a.py", "b.py"):
        _age(project / name)
    cold = lint_paths(["."], config, jobs=1, cache=True)
    file = _cache_files(project)[0]
    document = json.loads(file.read_text())
    document["entries"][str(project / "a.py")]["findings"] = [["x", 1]]
    document["entries"][str(project / "b.py")]["findings"][0][0] = "not a line"
    file.write_text(json.dumps(document))
    parse_count.clear()
    warm = lint_paths(["."], config, jobs=1, cache=True)
    assert sorted(parse_count) == ["a.py", "b.py"]
    assert warm.findings == cold.findings and warm.files_cached == 1


def test_a_crash_is_not_cached(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(root=project)
    real = runner.lint_source

    def crashing(source: str, path: str, rules=None, package=None, spellings=NO_SPELLINGS, *_, **__):
        raise KeyError("boom")

    monkeypatch.setattr(runner, "lint_source", crashing)
    crashed = lint_paths(["a.py"], config, cache=True)
    assert [finding.code for finding in crashed.findings] == [INTERNAL_ERROR_CODE]
    monkeypatch.setattr(runner, "lint_source", real)
    fixed = lint_paths(["a.py"], config, cache=True)
    assert fixed.files_cached == 0 and fixed.findings and not fixed.has_tool_errors


def test_the_cache_lives_at_the_config_root_and_ignores_itself(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "pyproject.toml").write_text("[tool.csan-lint]\n")
    (project / "pkg").mkdir()
    (project / "pkg" / "m.py").write_text(FLAGGED[0])
    monkeypatch.chdir(project / "pkg")
    result = CliRunner().invoke(main, ["m.py"])
    assert result.exit_code == 1
    assert not (project / "pkg" / CACHE_DIR_NAME).exists()
    assert (project / CACHE_DIR_NAME / ".gitignore").read_text().splitlines()[-1] == "*"
    assert len(_cache_files(project)) == 1
    git = subprocess.run(["git", "init", "-q", str(project)], capture_output=True, check=False)
    if git.returncode == 0:  # git status would list the cache if its .gitignore did not work
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"], cwd=project, capture_output=True, text=True
        )
        assert CACHE_DIR_NAME not in status.stdout and "pkg/m.py" in status.stdout


def test_no_cache_writes_nothing_and_reads_nothing(project: Path, parse_count: list[str]) -> None:
    assert CliRunner().invoke(main, ["--no-cache", "."]).exit_code == 1
    assert not (project / CACHE_DIR_NAME).exists()
    assert CliRunner().invoke(main, ["."]).exit_code == 1
    assert (project / CACHE_DIR_NAME).is_dir()
    parse_count.clear()
    assert CliRunner().invoke(main, ["--no-cache", "."]).exit_code == 1
    assert sorted(parse_count) == ["a.py", "b.py"]


def test_an_unwritable_cache_is_only_a_slower_run(project: Path) -> None:
    (project / CACHE_DIR_NAME).write_text("a file where the directory should be")
    config = load_config(["."])
    first = lint_paths(["."], config, cache=True)
    assert first.findings and first == lint_paths(["."], replace(config), cache=False)


def _locations(output: str) -> list[str]:
    """`path:line:col: CODE` of each finding line, and the summary line. Messages are left out:
    some name a producing method chosen in an order that varies between processes (reported)."""
    lines = [line for line in output.splitlines() if line and not line.startswith(" ")]
    return [line if line.startswith("Found") else " ".join(line.split(" ")[:2]) for line in lines]


def test_two_concurrent_runs_share_one_cache(project: Path) -> None:
    for index in range(40):
        (project / f"m{index:02}.py").write_text(FLAGGED[index % len(FLAGGED)] if index % 3 else PLAIN)
    expected = subprocess.run(
        [sys.executable, "-m", "csan_lint", "--no-cache", "."], capture_output=True, text=True, cwd=project
    )
    command = [sys.executable, "-m", "csan_lint", "."]
    for _ in range(2):  # a cold pair (both writing) then a warm pair (both reading)
        runs = [
            subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=120) for run in runs]
        assert [run.returncode for run in runs] == [1, 1]
        assert [_locations(output) for output, _ in outputs] == [_locations(expected.stdout)] * 2
        assert [errors for _, errors in outputs] == ["", ""]
        (file,) = _cache_files(project)
        assert len(json.loads(file.read_text())["entries"]) == 43
    assert not [path for path in (project / CACHE_DIR_NAME).iterdir() if path.suffix == ".tmp"]


def test_runs_over_different_files_keep_each_others_entries(project: Path) -> None:
    """Two runs open the cache before either saves: the later save merges, it does not clobber."""
    config = Config(root=project)
    first, second = cache.ResultCache(project, config), cache.ResultCache(project, config)
    first.store(project / "a.py", None, [], parsed=False, digest="hash-a")
    second.store(project / "b.py", None, [], parsed=False, digest="hash-b")
    first.save()
    second.save()
    third = cache.ResultCache(project, config)
    assert third.lookup(project / "a.py", "a.py", None, "hash-a") is not None
    assert third.lookup(project / "b.py", "b.py", None, "hash-b") is not None
    assert third.lookup(project / "b.py", "b.py", None, "hash-other") is None


def test_entries_of_deleted_files_are_pruned(project: Path) -> None:
    config = Config(root=project)
    lint_paths(["."], config, cache=True)
    (project / "b.py").unlink()
    (project / "new.py").write_text(PLAIN)
    lint_paths(["new.py"], config, cache=True)
    entries = json.loads(_cache_files(project)[0].read_text())["entries"]
    assert sorted(Path(path).name for path in entries) == ["a.py", "new.py", "plain.py"]


@pytest.mark.parametrize("module", ["streams.py", "shell/cache.py", "analysis/tokens.py"])
def test_the_fingerprint_of_the_analysis_sources_sees_every_lint_module(module: str) -> None:
    """An editable install changes code without changing its version: an edit anywhere under
    lint/, a subpackage included, must start a fresh cache."""
    source = Path(cache.__file__).parents[1] / module
    assert source.is_file(), source
    if not os.access(source, os.W_OK):
        pytest.skip("the installed sources are not ours to touch")
    before, status = cache._source_fingerprint(), source.stat()
    try:
        os.utime(source, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
        assert cache._source_fingerprint() != before
    finally:
        os.utime(source, ns=(status.st_atime_ns, status.st_mtime_ns))
