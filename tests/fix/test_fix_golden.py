"""Golden fixes: tests/fix/cases/<name>.py is fixed into <name>.fixed.py, and `--diff` prints
<name>.diff. Cases named `unsafe_*` need `--unsafe-fixes`; `no_fix.py` has findings no edit is
certain to fix. For every case: the fix only inserts lines (formatting and comments kept), the
fixed file parses and lints clean, and fixing it again changes nothing."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from csan_lint.lint.engine import lint_source
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.fix import fix_source

CASES = Path(__file__).parent / "cases"
NAMES = sorted(path.stem for path in CASES.glob("*.py") if not path.name.endswith(".fixed.py"))
FIXABLE = [name for name in NAMES if name != "no_fix"]


def _check_golden(path: Path, actual: str, update: bool) -> None:
    if update:
        path.write_bytes(actual.encode())
    assert actual == path.read_bytes().decode(), f"{path.name} differs (pytest --update-golden rewrites it)"


@pytest.mark.parametrize("name", FIXABLE)
def test_fix_matches_golden_and_is_complete(name: str, update_golden: bool) -> None:
    source = (CASES / f"{name}.py").read_text()
    before = lint_source(source, f"{name}.py")
    assert before and all(finding.edits for finding in before)
    result = fix_source(source, f"{name}.py", unsafe=name.startswith("unsafe_"))
    _check_golden(CASES / f"{name}.fixed.py", result.source, update_golden)
    cst.parse_module(result.source)
    assert lint_source(result.source, f"{name}.py") == [] == result.remaining
    assert result.fixed == len(before)


@pytest.mark.parametrize("name", FIXABLE)
def test_fix_only_inserts_lines(name: str) -> None:
    source = (CASES / f"{name}.py").read_text()
    fixed = (CASES / f"{name}.fixed.py").read_text()
    matcher = difflib.SequenceMatcher(a=source.splitlines(), b=fixed.splitlines(), autojunk=False)
    assert {tag for tag, *_ in matcher.get_opcodes()} == {"equal", "insert"}


@pytest.mark.parametrize("name", FIXABLE)
def test_fixing_twice_changes_nothing(name: str) -> None:
    fixed = (CASES / f"{name}.fixed.py").read_text()
    again = fix_source(fixed, f"{name}.py", unsafe=True)
    assert (again.source, again.fixed, again.remaining) == (fixed, 0, [])


@pytest.mark.parametrize("name", [name for name in NAMES if name.startswith("unsafe_")])
def test_unsafe_fixes_need_the_flag(name: str) -> None:
    source = (CASES / f"{name}.py").read_text()
    findings = lint_source(source, f"{name}.py")
    assert findings and {finding.fix_safety for finding in findings} == {"unsafe"}
    result = fix_source(source, f"{name}.py")
    assert (result.source, result.fixed, len(result.remaining)) == (source, 0, len(findings))


def test_uncertain_fixes_are_not_offered() -> None:
    """A stream made by a call (a new stream each time), a block nested in another stream's
    block, a use in an `elif` test, a download read in the statement that makes it: no edit,
    the finding stays."""
    source = (CASES / "no_fix.py").read_text()
    findings = lint_source(source, "no_fix.py")
    assert [finding.code for finding in findings] == ["CSL101", "CSL101", "CSL102", "CSL301"]
    assert not any(finding.edits for finding in findings)
    assert fix_source(source, "no_fix.py", unsafe=True).source == source


@pytest.mark.parametrize("name", NAMES)
def test_diff_matches_golden(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, update_golden: bool) -> None:
    shutil.copyfile(CASES / f"{name}.py", tmp_path / f"{name}.py")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--diff", "--unsafe-fixes", "--no-cache", f"{name}.py"])
    assert result.exit_code == (0 if name == "no_fix" else 1), result.output
    _check_golden(CASES / f"{name}.diff", result.stdout, update_golden)
    assert (tmp_path / f"{name}.py").read_bytes() == (CASES / f"{name}.py").read_bytes()  # --diff writes nothing
