"""`--format github`: one workflow command per finding, escaped so that no path or message can
end the command early or forge another one."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.output import format_github, github_annotation
from csan_lint.lint.shell.runner import LintResult


def _finding(path: str = "a.py", message: str = "m", fix: str | None = None) -> Finding:
    return Finding(path, 3, 5, "CSL101", message, 4, 9, Span(2, 4), fix)


def test_annotation_fields() -> None:
    assert github_annotation(_finding(fix="do x")) == (
        "::error file=a.py,line=3,col=5,endLine=4,endColumn=9,title=CSL101 missing-wait-stream::m%0Ahelp: do x"
    )


def test_properties_escape_percent_newlines_colon_and_comma() -> None:
    line = github_annotation(_finding(path="dir,x/a:b%c\r\n.py"))
    assert "file=dir%2Cx/a%3Ab%25c%0D%0A.py," in line
    # Exactly the separators we put there: one `::` after the command, one before the message.
    assert line.count("::") == 2 and "\n" not in line and "\r" not in line


def test_message_escapes_percent_and_newlines_but_keeps_colons_and_commas() -> None:
    line = github_annotation(_finding(message="50% done,\r\nthen: ::warning ::forged"))
    assert line.endswith("::50%25 done,%0D%0Athen: ::warning ::forged")
    assert "\n" not in line


def test_summary_line_unless_quiet() -> None:
    result = LintResult([_finding()], files_checked=1, files_parsed=1)
    assert format_github(result).splitlines()[1] == "Found 1 finding in 1 file."
    assert format_github(result, quiet=True).splitlines() == [github_annotation(_finding())]
    assert format_github(LintResult([], 1, 1), quiet=True) == ""


def test_cli_exit_status_follows_the_findings(project: Path) -> None:
    dirty = CliRunner().invoke(main, ["--format", "github", "pkg"])
    assert dirty.exit_code == 1
    assert [line.split("::")[1].split(",")[0] for line in dirty.stdout.splitlines()[:2]] == [
        "error file=pkg/buggy.py",
        "error file=pkg/buggy.py",
    ]
    clean = CliRunner().invoke(main, ["--format", "github", "clean.py"])
    assert (clean.exit_code, clean.stdout) == (0, "All checks passed.\n")
