"""Applying edits to text, the fix loop's guards, the catalog's fixes, and `--fix` on the command
line (files written, summary, exit status, suppressions, the cache)."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Edit
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell import fix
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.fix import apply_edits, fix_source

BUGGY = textwrap.dedent(
    """\
    import torch


    def forward(x, s):
        y = x * 2
        with torch.cuda.stream(s):
            z = y + 1
        torch.cuda.current_stream().wait_stream(s)
        return z
    """
)
WAIT = "    s.wait_stream(torch.cuda.current_stream())\n"


def test_insertions_take_the_anchor_indentation_and_the_file_newline() -> None:
    source = "def f():\r\n\tif a:\r\n\t\tb()\r\n\tc()"
    edits = [Edit(5, 2, "d()"), Edit(3, 3, "e()")]
    assert apply_edits(source, edits) == "def f():\r\n\tif a:\r\n\t\te()\r\n\t\tb()\r\n\tc()\r\n\td()\r\n"


def test_an_insertion_already_made_is_not_made_again() -> None:
    source = "a()\nb()\n"
    assert apply_edits(source, [Edit(2, 2, "a()")]) == source
    assert apply_edits(source, [Edit(3, 1, "b()")]) == source
    assert apply_edits("a()\nb()  # kept\n", [Edit(3, 1, "b()")]) == "a()\nb()  # kept\n"
    assert apply_edits("if c:\n    a()\n", [Edit(3, 1, "a()")]) == "if c:\n    a()\na()\n"
    assert apply_edits(source, [Edit(2, 2, "c()"), Edit(3, 1, "c()"), Edit(2, 2, "c()")]) == "a()\nc()\nb()\n"


def test_one_insertion_of_a_statement_per_function_and_pass() -> None:
    source = "def f():\n    a()\n    b()\ndef g():\n    c()\n"
    edits = [Edit(3, 3, "j()", scope=1), Edit(2, 2, "j()", scope=1), Edit(5, 5, "j()", scope=4)]
    assert apply_edits(source, edits) == "def f():\n    j()\n    a()\n    b()\ndef g():\n    j()\n    c()\n"


def test_edits_out_of_range_are_ignored() -> None:
    assert apply_edits("a()\n", [Edit(9, 1, "b()"), Edit(1, 5, "c()")]) == "a()\n"


def test_form_feeds_do_not_shift_lines() -> None:
    """`str.splitlines` would split at the form feed; Python and libcst count lines by newline only."""
    source = "a()\x0c\nb()\n"
    assert apply_edits(source, [Edit(2, 2, "c()")]) == "a()\x0c\nc()\nb()\n"


def test_a_suppressed_finding_is_not_fixed() -> None:
    source = BUGGY.replace("z = y + 1", "z = y + 1  # noqa: CSL101")
    result = fix_source(source, "m.py")
    assert result.source == source and result.fixed == 0 and result.remaining == []


def test_a_pass_that_does_not_reduce_the_findings_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit that fixes nothing (here: a no-op statement) is not kept."""
    from csan_lint.lint.shell import fix

    findings = lint_source(BUGGY, "m.py")
    useless = [replace(finding, edits=(Edit(5, 5, "pass"),)) for finding in findings]
    monkeypatch.setattr(fix, "lint_source", lambda source, path, rules=None, **_: useless)
    assert fix_source(BUGGY, "m.py").source == BUGGY


def test_a_pass_that_breaks_the_syntax_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    findings = lint_source(BUGGY, "m.py")
    broken = [replace(finding, edits=(Edit(5, 5, "y = ("),)) for finding in findings * 2]  # 2 > 1 syntax error
    monkeypatch.setattr(
        fix,
        "lint_source",
        lambda source, path, rules=None, **_: broken if source == BUGGY else lint_source(source, path),
    )
    assert fix_source(BUGGY, "m.py").source == BUGGY


def _invalid_examples() -> list[tuple[str, int, str]]:
    return [(rule.code, index, example.code) for rule in all_rules() for index, example in enumerate(rule.INVALID)]


@pytest.mark.parametrize(("code", "index", "example"), _invalid_examples())
def test_catalog_fixes_agree_with_their_help_and_converge(code: str, index: int, example: str) -> None:
    """Every flagged example of every rule: a safe edit is the statement its `help:` quotes, and
    fixing makes code that parses, has fewer findings, and is stable."""
    findings = lint_source(example, "example.py")
    for finding in findings:
        for edit in finding.edits:
            if finding.fix_safety == "safe":
                assert finding.fix is not None and f"`{edit.text}`" in finding.fix, (finding.fix, edit)
    result = fix_source(example, "example.py", unsafe=True)
    if any(finding.edits for finding in findings):
        assert len(result.remaining) < len(findings)
    again = fix_source(result.source, "example.py", unsafe=True)
    assert again.source == result.source


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **files: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)


def test_fix_writes_the_file_and_reports_what_it_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path, monkeypatch, **{"m.py": BUGGY, "clean.py": "import torch\n"})
    first = CliRunner().invoke(main, ["--fix", "--no-cache", "."])
    assert first.exit_code == 0, first.output
    assert first.stderr == "Fixed 1 finding (0 remaining).\n"
    assert (tmp_path / "m.py").read_text() == BUGGY.replace("    with", WAIT + "    with")
    second = CliRunner().invoke(main, ["--fix", "--no-cache", "."])
    assert (second.exit_code, second.stderr) == (0, "Fixed 0 findings (0 remaining).\n")


def test_fix_leaves_unsafe_fixes_and_reports_them_remaining(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    aliased = BUGGY.replace("import torch\n", "import torch.cuda as tc\n").replace("torch.cuda.", "tc.")
    _project(tmp_path, monkeypatch, **{"m.py": aliased})
    safe = CliRunner().invoke(main, ["--fix", "--no-cache", "m.py"])
    assert safe.exit_code == 1 and "CSL101" in safe.stdout and safe.stderr == "Fixed 0 findings (1 remaining).\n"
    assert (tmp_path / "m.py").read_text() == aliased
    unsafe = CliRunner().invoke(main, ["--fix", "--unsafe-fixes", "--no-cache", "m.py"])
    assert unsafe.exit_code == 0 and "    side" not in unsafe.stdout
    assert "    s.wait_stream(tc.current_stream())\n    with tc.stream(s):" in (tmp_path / "m.py").read_text()


def test_fix_after_a_cached_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache keeps findings without their edits; `--fix` lints the file afresh."""
    _project(tmp_path, monkeypatch, **{"m.py": BUGGY, "pyproject.toml": "[tool.csan-lint]\n"})
    assert CliRunner().invoke(main, ["m.py"]).exit_code == 1
    fixed = CliRunner().invoke(main, ["--fix", "m.py"])
    assert (fixed.exit_code, fixed.stderr) == (0, "Fixed 1 finding (0 remaining).\n")
    assert CliRunner().invoke(main, ["m.py"]).exit_code == 0


def test_diff_writes_nothing_and_exits_zero_when_there_is_nothing_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path, monkeypatch, **{"m.py": BUGGY})
    patch = CliRunner().invoke(main, ["--diff", "--no-cache", "m.py"])
    assert patch.exit_code == 1 and patch.stdout.startswith("--- a/m.py\n+++ b/m.py\n")
    assert f"+{WAIT}" in patch.stdout and patch.stderr == "Would fix 1 finding.\n"
    assert (tmp_path / "m.py").read_text() == BUGGY
    (tmp_path / "m.py").write_text(fix_source(BUGGY, "m.py").source)
    nothing = CliRunner().invoke(main, ["--diff", "--no-cache", "m.py"])
    assert (nothing.exit_code, nothing.stdout) == (0, "")


def test_fix_keeps_the_file_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "# -*- coding: latin-1 -*-\n" + BUGGY.replace("y = x * 2", "y = x * 2  # café")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_bytes(source.encode("latin-1"))
    assert CliRunner().invoke(main, ["--fix", "--no-cache", "m.py"]).exit_code == 0
    assert (tmp_path / "m.py").read_bytes().decode("latin-1") == source.replace("    with", WAIT + "    with")


def test_fix_with_confirm_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path, monkeypatch, **{"m.py": BUGGY})
    result = CliRunner().invoke(main, ["--fix", "--confirm", "m.py"])
    assert result.exit_code == 2 and "without --confirm" in result.stderr
    assert (tmp_path / "m.py").read_text() == BUGGY


def test_a_file_that_cannot_be_written_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path, monkeypatch, **{"m.py": BUGGY})

    def refuse(self: Path, data: bytes) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_bytes", refuse)
    result = CliRunner().invoke(main, ["--fix", "--no-cache", "m.py"])
    assert result.exit_code == 2
    assert "m.py:1:1: CSL003 cannot write fixed file: Permission denied" in result.stdout
    assert (tmp_path / "m.py").read_text() == BUGGY
