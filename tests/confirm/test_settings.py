"""`[tool.csan-lint.confirm]` + command line -> settings; the runs that end before any test."""

from __future__ import annotations

from pathlib import Path

import pytest

from csan_lint.lint.config import Config
from csan_lint.lint.model import Finding, Span
from csan_lint.runtime import confirm
from csan_lint.runtime.confirm import ConfirmUsageError, resolve_settings


def config(tmp_path: Path, **table) -> Config:
    return Config(root=tmp_path, source=tmp_path / "pyproject.toml", confirm=table)


def test_defaults(tmp_path):
    settings = resolve_settings(config(tmp_path), {})
    assert (settings.tests, settings.timeout, settings.device, settings.fail_on) == (
        None, 60.0, "auto", frozenset({"confirmed"}),
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
    ],
)
def test_bad_values_say_where_and_what(tmp_path, table, options, message):
    with pytest.raises(ConfirmUsageError, match=message.replace("?", r"\?").replace("(", r"\(")) as caught:
        resolve_settings(config(tmp_path, **table), options)
    if table:
        assert "pyproject.toml [tool.csan-lint.confirm]" in str(caught.value)


def test_no_findings_runs_nothing_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(confirm, "select_tests", lambda *a, **k: pytest.fail("selection ran"))
    assert confirm.main([], ["src"], config(tmp_path), {}) == 0
    assert "No findings: nothing to confirm" in capsys.readouterr().out


def test_missing_torch_names_what_to_install(tmp_path, capsys, monkeypatch):
    real_find_spec = confirm.importlib.util.find_spec
    monkeypatch.setattr(
        confirm.importlib.util, "find_spec", lambda name: None if name == "torch" else real_find_spec(name)
    )
    finding = Finding("a.py", 1, 1, "CSL101", "m", 1, 2, Span(1, 1))
    assert confirm.main([finding], ["a.py"], config(tmp_path), {}) == 2
    err = capsys.readouterr().err
    assert "missing: torch" in err and "pip install 'csan-lint[runtime]' torch" in err


def test_bad_config_exits_2(tmp_path, capsys):
    assert confirm.main([], ["src"], config(tmp_path, device="tpu"), {}) == 2
    assert "device: expected one of" in capsys.readouterr().err
