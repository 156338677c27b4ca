"""CLI behaviour that golden files show poorly: exit-status precedence, flag splitting, and an
internal failure outside any one file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell import cli, runner

FLAGGED = all_rules()[0].INVALID[0].code


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flagged.py").write_text(FLAGGED)
    return tmp_path


def test_exit_zero_does_not_hide_an_unchecked_file(project: Path) -> None:
    assert CliRunner().invoke(cli.main, ["--exit-zero", "flagged.py"]).exit_code == 0
    result = CliRunner().invoke(cli.main, ["--exit-zero", "flagged.py", "missing.py"])
    assert result.exit_code == 2
    assert "missing.py:1:1: CSL003 no such file or directory" in result.stdout


def test_select_values_split_on_commas_and_repeat(project: Path) -> None:
    codes = [rule.code for rule in all_rules()]
    result = CliRunner().invoke(cli.main, ["--select", f"{codes[0]}, {codes[1]}", "--select", codes[2], "--statistics"])
    reported = {line.split()[1] for line in result.stdout.splitlines()[:-1]}
    assert reported and reported <= set(codes[:3])


def test_a_failure_outside_any_file_is_a_message_not_a_traceback(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(paths, config, **options):
        raise RuntimeError("discovery exploded")

    monkeypatch.setattr(runner, "lint_in_stages", broken)  # the command imports it when it runs
    result = CliRunner().invoke(cli.main, ["."])
    assert result.exit_code == 2
    assert result.stderr == "error: internal error: RuntimeError: discovery exploded\n"
    assert "Traceback" not in result.output


def test_json_summary_counts_only_checked_files_as_files_with_findings(project: Path) -> None:
    import json

    result = CliRunner().invoke(cli.main, ["--format", "json", "flagged.py", "missing.py", "gone/"])
    summary = json.loads(result.stdout)["summary"]
    paths = {finding["path"] for finding in json.loads(result.stdout)["findings"]}
    assert paths == {"flagged.py", "missing.py", "gone"}
    assert (summary["files_checked"], summary["files_with_findings"]) == (1, 1)


def test_rule_all_explains_every_rule_and_rule_needs_a_code(project: Path) -> None:
    result = CliRunner().invoke(cli.main, ["rule", "--all"])
    assert result.exit_code == 0
    headers = [line for line in result.stdout.splitlines() if line.startswith("CSL")]
    assert headers == [f"{rule.code} {rule.name}" for rule in all_rules()]
    bare = CliRunner().invoke(cli.main, ["rule"])
    assert bare.exit_code == 2 and "give a rule code" in bare.stderr


def test_server_without_its_extra_says_what_to_install(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "csan_lint.lint.shell.server", raising=False)
    monkeypatch.setitem(sys.modules, "lsprotocol", None)  # what an install without [lsp] looks like
    result = CliRunner().invoke(cli.main, ["server"])
    assert result.exit_code == 2
    assert "pip install 'csan-lint[lsp]'" in result.stderr and "Traceback" not in result.output
