"""`[tool.csan-lint.confirm]` + command line -> settings; the runs that end before any test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.shell.config import Config
from csan_lint.runtime import confirm
from csan_lint.runtime.confirm import INSTALL_HINT, ConfirmUsageError, resolve_settings
from csan_lint.runtime.confirm_verdict import Race, RunResult, TestRun


def config(tmp_path: Path, **table) -> Config:
    return Config(root=tmp_path, source=tmp_path / "pyproject.toml", confirm=table)


def test_defaults(tmp_path):
    settings = resolve_settings(config(tmp_path), {})
    assert (settings.tests, settings.timeout, settings.device, settings.fail_on) == (
        None,
        60.0,
        "auto",
        frozenset({"confirmed"}),
    )


def test_file_values_and_relative_test_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)
    table = {"tests": ["gpu_tests"], "timeout": 5, "device": "emulated", "fail-on": ["unexercised", "error"]}
    settings = resolve_settings(config(tmp_path, **table), {})
    assert settings.tests == (f"{tmp_path.name}/gpu_tests",)
    assert (settings.timeout, settings.device) == (5.0, "emulated")
    assert settings.fail_on == {"confirmed", "unexercised", "error"}


def test_command_line_wins(tmp_path):
    table = {"tests": ["a"], "timeout": 5, "device": "cuda", "fail-on": ["error"]}
    options = {"tests": ("b",), "timeout": 7.5, "device": "emulated", "fail_on": "unexercised", "verbose": True}
    settings = resolve_settings(config(tmp_path, **table), options)
    assert (settings.tests, settings.timeout, settings.device) == (("b",), 7.5, "emulated")
    assert settings.fail_on == {"confirmed", "unexercised"}
    assert settings.verbose


@pytest.mark.parametrize(
    ("table", "options", "message"),
    [
        ({"timout": 3}, {}, "unknown key `timout`; did you mean `timeout`?"),
        ({"timeout": 0}, {}, "timeout: expected a positive number of seconds, got 0"),
        ({"timeout": "10"}, {}, "timeout: expected a positive number of seconds"),
        ({"device": "gpu"}, {}, "device: expected one of auto, cuda, emulated, got 'gpu'"),
        ({"fail-on": ["unexcercised"]}, {}, "unknown verdict `unexcercised`"),
        ({"tests": 3}, {}, "tests: expected a list of paths"),
        ({}, {"fail_on": "confirmed,bogus"}, "--fail-on: unknown verdict `bogus`"),
        ({}, {"timeout": -1.0}, "--timeout: expected a positive number"),
        ({}, {"workers": -1}, "-n: expected a number of worker processes"),
    ],
)
def test_bad_values_say_where_and_what(tmp_path, table, options, message):
    with pytest.raises(ConfirmUsageError, match=message.replace("?", r"\?").replace("(", r"\(")) as caught:
        resolve_settings(config(tmp_path, **table), options)
    if table:
        assert "pyproject.toml [tool.csan-lint.confirm]" in str(caught.value)


def test_no_stream_code_and_no_finding_runs_nothing_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "plain.py").write_text("import torch\n\ndef f(x):\n    return x.sum()\n")
    monkeypatch.setattr(confirm, "select_tests", lambda *a, **k: pytest.fail("selection ran"))
    assert confirm.main([], ["src"], config(tmp_path), {}) == 0
    assert "No stream code and no finding under the paths: no test to run." in capsys.readouterr().err


def test_workers_without_pytest_xdist_say_what_to_install(tmp_path, monkeypatch):
    real_find_spec = confirm.importlib.util.find_spec
    monkeypatch.setattr(
        confirm.importlib.util, "find_spec", lambda name: None if name == "xdist" else real_find_spec(name)
    )
    with pytest.raises(ConfirmUsageError, match="-n 2 needs pytest-xdist: pip install pytest-xdist"):
        resolve_settings(config(tmp_path), {"workers": 2})
    assert resolve_settings(config(tmp_path), {"workers": 0}).workers == 0


def test_missing_torch_names_what_to_install(tmp_path, capsys, monkeypatch):
    real_find_spec = confirm.importlib.util.find_spec
    monkeypatch.setattr(
        confirm.importlib.util, "find_spec", lambda name: None if name == "torch" else real_find_spec(name)
    )
    finding = Finding("a.py", 1, 1, "CSL101", "m", 1, 2, Span(1, 1))
    assert confirm.main([finding], ["a.py"], config(tmp_path), {}) == 2
    err = capsys.readouterr().err
    assert "missing: torch" in err and INSTALL_HINT in err


def test_bad_config_exits_2(tmp_path, capsys):
    assert confirm.main([], ["src"], config(tmp_path, device="tpu"), {}) == 2
    assert "device: expected one of" in capsys.readouterr().err


class _FakeRunner:
    """Stands in for the pytest subprocess: returns a prepared result, records its arguments."""

    result = None
    calls: list = []

    def __init__(self, settings, progress):
        self.settings = settings
        self.device = "emulated"

    def run(self, test_files, spans):
        _FakeRunner.calls.append((self.settings, list(test_files), dict(spans)))
        return _FakeRunner.result


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text("import torch\n" + "\n" * 30)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("import mod\n")
    (tmp_path / "tests" / "test_other.py").write_text("import os\n")
    monkeypatch.setattr(confirm, "Runner", _FakeRunner)
    _FakeRunner.calls = []
    return tmp_path


def _run_with(result, project, capsys, **options):
    _FakeRunner.result = result or RunResult({}, [])
    findings = [
        Finding("mod.py", 10, 5, "CSL101", "racy", 10, 9, Span(10, 11)),
        Finding("mod.py", 20, 5, "CSL101", "never run", 20, 9, Span(20, 21)),
    ]
    code = confirm.main(findings, ["mod.py"], config(project), options)
    return code, capsys.readouterr()


def _race(line, severity="error"):
    frame = {"file": os.path.realpath("mod.py"), "line": line, "function": "f"}
    access = {"stream": 3, "operator": "aten::add", "argument": "self", "is_write": False, "stack": [frame]}
    return {
        "kind": "read-after-write",
        "severity": severity,
        "message": "m",
        "allocation": None,
        "current": access,
        "previous": None,
    }


def test_main_runs_only_the_importing_tests_with_the_settings(project, capsys):
    code, out = _run_with(None, project, capsys, device="emulated", timeout=9.0)
    ((settings, test_files, spans),) = _FakeRunner.calls
    assert test_files == ["tests/test_mod.py"]
    assert (settings.device, settings.timeout) == ("emulated", 9.0)
    assert list(spans.values()) == [[Span(10, 11), Span(20, 21)]]
    assert "Running 1 test file(s)" in out.err
    assert out.out.splitlines()[-1] == "0 confirmed, 0 other-race, 0 dismissed, 2 unexercised, 0 error; 0 runtime-only"
    assert code == 0


def test_fail_on_widens_the_exit_code_and_exit_zero_silences_it(project, capsys):
    assert _run_with(None, project, capsys, fail_on="unexercised")[0] == 1
    assert _run_with(None, project, capsys, fail_on="unexercised", exit_zero=True)[0] == 0


def test_confirmed_fails_and_json_carries_the_report(project, capsys):
    tests = {"tests/test_mod.py::t": TestRun("tests/test_mod.py::t", "passed", None, {})}
    code, out = _run_with(
        RunResult(tests, [Race("tests/test_mod.py::t", _race(11))]), project, capsys, output_format="json"
    )
    document = json.loads(out.out)
    assert [finding["verdict"] for finding in document["findings"]] == ["confirmed", "unexercised"]
    assert document["findings"][0]["runtime_report"]["current"]["stack"][0]["line"] == 11
    assert document["tests"] == [{"nodeid": "tests/test_mod.py::t", "outcome": "passed", "reason": None, "gap": None}]
    assert code == 1


@pytest.mark.parametrize(
    ("severity", "label", "expected"), [("error", "runtime-only", 1), ("warning", "runtime-only warning", 0)]
)
def test_runtime_only_races_fail_and_warnings_do_not(project, capsys, severity, label, expected):
    code, out = _run_with(RunResult({}, [Race("tests/test_mod.py::t", _race(25, severity))]), project, capsys)
    assert f"mod.py:25: CSL901 {label}  m (tests/test_mod.py::t)" in out.out
    assert code == expected


def test_cli_without_torch_says_what_to_install(tmp_path):
    """The real command line, in a process where torch cannot be imported."""
    (tmp_path / "mod.py").write_text(
        "import torch\n\ndef f(x, s):\n    y = x * 2\n    with torch.cuda.stream(s):\n        z = y + 1\n    return z\n"
    )
    script = "import sys; sys.modules['torch'] = None; from csan_lint.lint.shell.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", script, "mod.py", "--confirm"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "missing: torch" in done.stderr
    assert INSTALL_HINT in done.stderr
