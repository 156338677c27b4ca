"""The real-suite harness (benchmarks/realsuite/): its manifest, the broken shadow copy of an
installed package a deliberate bug runs from, and the race sites it compares runs by."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "realsuite"))

import runs
import suites
from runs import PytestRun, race_sites
from suites import Bug, ManifestError, load, shadow_with_bug


def test_the_committed_manifest_loads_and_pins_every_suites_package():
    versions, loaded = load()
    assert versions["torch"] == "2.13.0"
    assert {s.name for s in loaded} >= {"transformers", "torchao", "tensordict"}
    for suite in loaded:
        assert suite.package in versions
        assert suite.bugs, f"{suite.name} has no deliberate bug"


def test_a_bad_manifest_names_the_suite_and_key(tmp_path):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        '[versions]\nlib = "1.0"\n[suite.s]\npackage = "lib"\ntests = ["t.py"]\nlint = "lib"\n'
        'subset = "all"\ntimeout = "soon"\n'
    )
    with pytest.raises(ManifestError, match=r"\[suite\.s\]: `timeout` must be a int"):
        load(manifest)
    manifest.write_text(manifest.read_text().replace('"soon"', "60") + 'cut = ["test"]\n')
    with pytest.raises(ManifestError, match=r"\[suite\.s\]: `cut` needs `repo` and `ref`"):
        load(manifest)


def _installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    package = site / "lib" / "sub"
    package.mkdir(parents=True)
    (site / "lib" / "__init__.py").write_text("")
    (site / "lib" / "other.py").write_text("X = 1\n")
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("def f(s):\n    s.wait_stream(t)\n    return 1\n")
    monkeypatch.setattr(suites, "site_packages", lambda: site)
    return site


def test_a_shadow_replaces_the_one_line_and_links_everything_else(tmp_path, monkeypatch):
    site = _installed(tmp_path, monkeypatch)
    shadow = tmp_path / "shadow"
    broken = shadow_with_bug(Bug("no wait", "lib/sub/mod.py", "s.wait_stream(t)"), shadow)
    assert broken == shadow / "lib" / "sub" / "mod.py"
    lines = broken.read_text().splitlines()
    assert lines[0] == "def f(s):" and lines[2] == "    return 1"
    assert lines[1].startswith("    pass  # realsuite deliberate bug")
    assert (shadow / "lib" / "other.py").resolve() == site / "lib" / "other.py"
    assert (shadow / "lib" / "sub" / "__init__.py").resolve() == site / "lib" / "sub" / "__init__.py"
    assert "wait_stream(t)\n" in (site / "lib" / "sub" / "mod.py").read_text()


def test_a_bug_line_that_is_not_exactly_one_line_is_an_error(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch)
    with pytest.raises(ManifestError, match="0 lines of .*mod.py"):
        shadow_with_bug(Bug("no sync", "lib/sub/mod.py", "torch.cuda.synchronize()"), tmp_path / "shadow")


def _race(nodeid: str, current: str, line: int) -> dict:
    def access(file: str, at: int, operator: str) -> dict:
        return {"operator": operator, "stack": [{"file": "/t/test_a.py", "line": 3}, {"file": file, "line": at}]}

    report = {
        "kind": "read-after-write",
        "current": access(current, line, "aten::cat"),
        "previous": access(current, 9, "aten::_to_copy"),
    }
    return {"type": "race", "nodeid": nodeid, "report": report}


def test_race_sites_compare_across_the_installed_tree_and_a_shadow(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "site_packages", lambda: Path("/site"))
    intact = PytestRun(
        "csan", 1.0, 0, False, races=[_race("t::a", "/site/lib/mod.py", 5), _race("t::b", "/site/lib/mod.py", 5)]
    )
    broken = PytestRun(
        "csan", 1.0, 0, False, races=[_race("t::a", "/shadow/lib/mod.py", 5), _race("t::a", "/shadow/lib/mod.py", 7)]
    )
    intact_sites = race_sites(intact, [])
    assert intact_sites == {
        "read-after-write: lib/mod.py:5 (aten::cat) <- lib/mod.py:9 (aten::_to_copy)": ["t::a", "t::b"]
    }
    new = set(race_sites(broken, [Path("/shadow")])) - set(intact_sites)
    assert new == {"read-after-write: lib/mod.py:7 (aten::cat) <- lib/mod.py:9 (aten::_to_copy)"}


def test_a_deliberate_bug_replaces_its_one_line_and_keeps_the_line_numbers():
    bug = Bug("no wait", "m.py", "s.wait_stream(t)")
    source = "def f(s, t):\n    s.wait_stream(t)\n    return 1\n"
    broken = suites.with_bug(bug, source, "m.py")
    assert broken.splitlines()[1].strip().startswith("pass") and broken.count("\n") == source.count("\n")
    with pytest.raises(ManifestError, match="2 lines of m.py"):
        suites.with_bug(bug, source + source, "m.py")
