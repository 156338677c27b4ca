"""Runtime codes (CSL9xx) are codes: `--ignore`, `per-file-ignores` and `# noqa` hide the races
`--confirm` reports on their own, and `--baseline` hides the races an earlier report had, known by
sites that survive lines inserted above them.

unflagged_project/ has no static finding and three runtime-only races: CSL901 twice at
app/offload.py's copy (two different earlier writes), CSL908 at tests/test_capture.py's capture.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.config import load_config
from csan_lint.runtime.confirm_filter import BaselineError, load_baseline, race_site_key
from csan_lint.runtime.confirm_verdict import RuntimeOnly

PROJECT = Path(__file__).parent / "unflagged_project"
FILES = ("app/offload.py", "tests/test_capture.py", "tests/test_offload.py")


def _report(path: Path, current: int, previous: int) -> dict:
    def side(line: int) -> dict:
        return {"stack": [{"file": str(path), "line": line, "function": "work"}]}

    return {"kind": "read-after-write", "current": side(current), "previous": side(previous)}


def test_a_site_key_survives_lines_inserted_above_and_changes_with_the_racing_line(tmp_path):
    path = tmp_path / "work.py"
    path.write_text("def work(x):\n    y = x * 2\n    return y + 1\n")
    before = race_site_key(
        RuntimeOnly("CSL901", "read-after-write", "work.py", 3, "m", (), _report(path, 3, 2)), tmp_path
    )
    assert before == "CSL901|work.py|work|return y + 1|work.py|work|y = x * 2"
    path.write_text("import os\n\n\ndef work(x):\n    y = x * 2\n    return   y + 1\n")
    moved = RuntimeOnly("CSL901", "read-after-write", "work.py", 6, "m", (), _report(path, 6, 5))
    assert race_site_key(moved, tmp_path) == before  # whitespace inside the line does not count either
    path.write_text("def work(x):\n    y = x * 2\n    return y + 2\n")
    edited = RuntimeOnly("CSL901", "read-after-write", "work.py", 3, "m", (), _report(path, 3, 2))
    assert race_site_key(edited, tmp_path) != before


def test_select_ignore_and_per_file_ignores_take_runtime_codes(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.csan-lint]\nignore = ["runtime-free-in-use"]\n[tool.csan-lint.per-file-ignores]\n"tests/*" = ["CSL90"]\n'
    )
    config = load_config([str(tmp_path)])
    source, test = tmp_path / "src" / "a.py", tmp_path / "tests" / "t.py"
    assert [config.reports(code, source) for code in ("CSL901", "CSL904", "CSL999")] == [True, False, True]
    assert config.reports("CSL901", test) is False and config.reports("CSL911", test) is True
    only_static = load_config([str(tmp_path)], select=["CSL1"])
    assert only_static.reports("CSL901", source) is False  # --select names what runs, as for rules
    assert load_config([str(tmp_path)], select=["CSL1"], extend_select=["CSL9"]).reports("CSL902", source)


def test_unknown_codes_are_still_refused_and_runtime_ones_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    assert CliRunner().invoke(main, ["--ignore", "CSL904", "a.py"]).exit_code == 0
    refused = CliRunner().invoke(main, ["--ignore", "CSL994", "a.py"])
    assert refused.exit_code == 2 and "unknown rule code or name `CSL994`" in refused.stderr


def test_a_baseline_that_is_no_confirm_report_is_a_located_error(tmp_path):
    for text, message in [
        ("{", "not JSON"),
        ('{"findings": []}', "not a `csan-lint --confirm --format json` report"),
        ('{"runtime_only": [{"kind": "free-in-use"}]}', "has no `site_key`"),
    ]:
        (tmp_path / "b.json").write_text(text)
        with pytest.raises(BaselineError, match=message):
            load_baseline(str(tmp_path / "b.json"))
    with pytest.raises(BaselineError, match="cannot read"):
        load_baseline(str(tmp_path / "missing.json"))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("unflagged_project")
    shutil.copytree(PROJECT, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def first_report(project, run_confirm):
    done = run_confirm(project)
    assert done.returncode == 1, done.stderr
    (project / "baseline.json").write_text(done.stdout)
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_report_keys_each_race_by_its_site(first_report):
    keys = sorted(entry["site_key"] for entry in first_report["runtime_only"])
    assert len(set(keys)) == 3
    assert keys[0].startswith('CSL901|app/offload.py|offload|host = activation.to("cpu", non_blocking=True)|')


@pytest.mark.slow
def test_with_lines_inserted_above_the_baseline_hides_every_old_race(project, first_report, run_confirm):
    for name in FILES:
        path = project / name
        path.write_text("# a comment\n# and another, above everything\n" + path.read_text())
    done = run_confirm(project, "--baseline", "baseline.json", output="text")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runtime-only  " not in done.stdout
    assert "note: 3 race(s) not shown: 3 known to baseline.json" in done.stdout.splitlines()


@pytest.mark.slow
def test_ignore_per_file_ignores_and_noqa_hide_runtime_races(tmp_path, run_confirm):
    pytest.importorskip("torch")
    shutil.copytree(PROJECT, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.csan-lint.per-file-ignores]\n"app/*" = ["runtime-read-after-write"]\n'
    )
    capture = tmp_path / "tests" / "test_capture.py"
    capture.write_text(
        capture.read_text().replace(
            "with torch.cuda.graph(graph, stream=offloader.stream):",
            "with torch.cuda.graph(graph, stream=offloader.stream):  # noqa: CSL908",
        )
    )
    done = run_confirm(tmp_path, "--ignore", "CSL904")  # a runtime code: no longer "unknown" (exit 2)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["runtime_only"] == []
    assert document["summary"]["not_shown"] == {"ignored": 2, "suppressed": 1, "baseline": 0}
