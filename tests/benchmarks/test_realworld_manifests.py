"""The real-world scripts on a manifest they are given (benchmarks/realworld: the held-out set is
one): cutting it, its needs_context/context keys, and versions linted inside checkouts of their
repository. A tiny synthetic repository stands in for a fetched snapshot."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "realworld"))

from corpus import CorpusError, load_manifest
from materialize import add_arguments, materialize_from
from precision_recall import score, unjudged

BUGGY = """import torch


def helper(x):
    return x + 1


def f(x, s):
    with torch.cuda.stream(s):
        y = x * 2
    return y
"""
FIXED = BUGGY.replace(
    "    with torch.cuda.stream(s):\n",
    "    s.wait_stream(torch.cuda.current_stream())\n    with torch.cuda.stream(s):\n",
)
SIBLING = "def imported():\n    return 0\n"


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str, str]:
    """A mirrors folder holding owner/name with two commits of pkg/m.py (buggy, then fixed) and a
    sibling module: (mirrors, buggy commit, fixed commit)."""
    repo = tmp_path / "mirrors" / "owner+name" / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "pkg" / "m.py").write_text(BUGGY, encoding="utf-8")
    (repo / "pkg" / "sibling.py").write_text(SIBLING, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "buggy")
    buggy = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "m.py").write_text(FIXED, encoding="utf-8")
    _git(repo, "commit", "-q", "-am", "fixed")
    return tmp_path / "mirrors", buggy, _git(repo, "rev-parse", "HEAD")


def _manifest(tmp_path: Path, buggy: str, fixed: str, extra: str = "") -> Path:
    path = tmp_path / "heldout.toml"
    path.write_text(
        f"""[[excerpt]]
id = "synthetic-missing-wait"
repo = "owner/name"
license = "MIT"
label = "bug"
commit = "{buggy}"
path = "pkg/m.py"
function = "f"
lines = [8, 11]
rules = ["CSL101"]
bug_lines = [10]
why = "x is read on s with no wait"
tracker = "https://example.invalid/1"
fixed = {{ commit = "{fixed}", lines = [8, 12] }}
{extra}""",
        encoding="utf-8",
    )
    return path


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_materialize_cuts_the_manifest_it_is_given(tmp_path: Path, snapshot: tuple[Path, str, str]) -> None:
    mirrors, buggy, fixed = snapshot
    manifest = _manifest(tmp_path, buggy, fixed)
    args = _args("--manifest", str(manifest), "--mirrors", str(mirrors), "--out", str(tmp_path / "out"))
    excerpts, written, problems = materialize_from(args)
    assert ([e.id for e in excerpts], problems) == (["synthetic-missing-wait"], [])
    cut = written["synthetic-missing-wait.py"].read_text(encoding="utf-8").splitlines()
    assert cut[9] == "        y = x * 2"  # line 10 stays line 10
    assert cut[3] == ""  # helper is blanked
    assert "s.wait_stream" in written["synthetic-missing-wait.fixed.py"].read_text(encoding="utf-8")


def test_a_manifest_line_span_that_is_wrong_is_named(tmp_path: Path, snapshot: tuple[Path, str, str]) -> None:
    mirrors, buggy, fixed = snapshot
    manifest = _manifest(tmp_path, buggy, fixed)
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace("lines = [8, 11]", "lines = [8, 10]"), encoding="utf-8"
    )
    args = _args("--manifest", str(manifest), "--mirrors", str(mirrors), "--out", str(tmp_path / "out"))
    _, written, problems = materialize_from(args)
    assert list(written) == ["synthetic-missing-wait.fixed.py"]
    assert problems == [f"synthetic-missing-wait: f spans lines 8-11 at {buggy}, the manifest says 8-10"]


def test_needs_context_comes_with_the_module_that_holds_the_rest(tmp_path: Path) -> None:
    with_context = _manifest(tmp_path, "a" * 40, "b" * 40, 'needs_context = true\ncontext = "pkg/caller.py"\n')
    assert load_manifest(with_context)[0].context == "pkg/caller.py"
    assert load_manifest(_manifest(tmp_path, "a" * 40, "b" * 40))[0].context is None
    for extra in ("needs_context = true\n", 'context = "pkg/caller.py"\n', 'needs_context = "yes"\n'):
        with pytest.raises(CorpusError, match="needs_context"):
            load_manifest(_manifest(tmp_path, "a" * 40, "b" * 40, extra))


def test_repo_context_names_each_version_inside_its_checkout(tmp_path: Path, snapshot: tuple[Path, str, str]) -> None:
    mirrors, buggy, fixed = snapshot
    manifest = _manifest(tmp_path, buggy, fixed)
    checkouts = tmp_path / "checkouts"
    args = _args("--manifest", str(manifest), "--mirrors", str(mirrors), "--out", str(checkouts), "--repo-context")
    _, written, problems = materialize_from(args)
    assert problems == []
    buggy_file, fixed_file = written["synthetic-missing-wait.py"], written["synthetic-missing-wait.fixed.py"]
    assert buggy_file == checkouts / f"owner+name@{buggy[:12]}" / "pkg" / "m.py"
    assert fixed_file == checkouts / f"owner+name@{fixed[:12]}" / "pkg" / "m.py"
    assert buggy_file.read_text(encoding="utf-8") == BUGGY  # the file as it was, not a cut
    assert (buggy_file.parent / "sibling.py").read_text(encoding="utf-8") == SIBLING


def test_excerpts_sharing_a_checkout_file_are_judged_in_their_own_lines(
    tmp_path: Path, snapshot: tuple[Path, str, str]
) -> None:
    mirrors, buggy, fixed = snapshot
    manifest = _manifest(tmp_path, buggy, fixed)
    second = manifest.read_text(encoding="utf-8").split("fixed =")[0]
    second = second.replace("synthetic-missing-wait", "synthetic-helper").replace(
        'function = "f"', 'function = "helper"'
    )
    second = second.replace("lines = [8, 11]", "lines = [4, 5]").replace("bug_lines = [10]", "bug_lines = [5]")
    manifest.write_text(manifest.read_text(encoding="utf-8") + "\n" + second, encoding="utf-8")
    args = _args("--manifest", str(manifest), "--mirrors", str(mirrors), "--out", str(tmp_path / "c"), "--repo-context")
    excerpts, written, _ = materialize_from(args)
    shared = written["synthetic-helper.py"]
    assert shared == written["synthetic-missing-wait.py"]
    findings = [
        {"path": str(shared), "line": 10, "code": "CSL101"},
        {"path": str(shared), "line": 1, "code": "CSL101"},
    ]
    scores = score(excerpts, findings, written, whole=True)
    verdicts = {(s.excerpt, s.version): s.verdict for s in scores}
    assert verdicts == {
        ("synthetic-missing-wait", "as-is"): "TP",
        ("synthetic-missing-wait", "fixed"): "TN",
        ("synthetic-helper", "as-is"): "FN",
    }
    assert unjudged(findings, scores) == 1  # line 1 lies in no excerpt
