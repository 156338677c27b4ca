"""The shipped examples are the product's demo: linting `examples/` must report exactly the
findings that the `# expect: CODE[, CODE]` comments in the example files name, at their lines, and
nothing in a fixed module. `examples/EXPECTED.md` lists the same findings with the verdict each
is meant to get from `--confirm`; it must agree with the markers."""

from __future__ import annotations

import re
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

from csan_lint.lint.registry import rule_by_code
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.runner import lint_paths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.py"))
MARKER = re.compile(r"\bexpect:\s*(?P<codes>[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)\s*$")
"""At the end of a comment, alone (`# expect: CSL101`) or after a note (`# why; expect: CSL101`)."""
TABLE_ROW = re.compile(r"^\|\s*`(?P<file>[\w/.]+):(?P<line>\d+)`\s*\|\s*(?P<code>\w+)\s*\|\s*(?P<verdict>\w+)\s*\|")
VERDICTS = {"confirmed", "dismissed", "unexercised"}

Expected = set[tuple[int, str]]


def markers(path: Path) -> Expected:
    """(line, code) for every `# expect:` comment in the file."""
    found: Expected = set()
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            match = MARKER.search(token.string) if token.type == tokenize.COMMENT else None
            if match:
                found.update((token.start[0], code.strip()) for code in match["codes"].split(","))
    return found


@pytest.fixture(scope="module")
def linted() -> dict[Path, Expected]:
    """Lint the whole examples/ tree once, as `csan-lint examples/` does: (line, code) per file."""
    result = lint_paths([str(EXAMPLES)], load_config([str(EXAMPLES)]))
    by_file: dict[Path, Expected] = defaultdict(set)
    for finding in result.findings:
        by_file[(Path.cwd() / finding.path).resolve()].add((finding.line, finding.code))
    assert result.files_checked == len(EXAMPLE_FILES)
    return by_file


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda path: str(path.relative_to(EXAMPLES)))
def test_linter_reports_exactly_the_marked_findings(path: Path, linted: dict[Path, Expected]) -> None:
    assert sorted(linted.get(path, set())) == sorted(markers(path))


def test_markers_name_real_rules() -> None:
    codes = {code for path in EXAMPLE_FILES for _, code in markers(path)}
    assert codes, "no `# expect:` markers found"
    assert sorted(code for code in codes if rule_by_code(code) is None) == []


def test_every_buggy_module_has_findings_a_fixed_twin_and_a_test() -> None:
    buggy = sorted(EXAMPLES.glob("*_buggy.py"))
    assert len(buggy) >= 6
    for path in buggy:
        topic = path.name.removesuffix("_buggy.py")
        assert markers(path), f"{path.name} has no `# expect:` marker"
        fixed = EXAMPLES / f"{topic}_fixed.py"
        assert fixed.is_file() and not markers(fixed), f"{fixed.name}: missing, or marked"
        assert (EXAMPLES / "tests" / f"test_{topic}.py").is_file()
    assert all(markers(path) for path in EXAMPLES.glob("*_safe.py"))


def test_expected_table_lists_the_marked_findings_with_a_verdict_each() -> None:
    rows = [match for line in (EXAMPLES / "EXPECTED.md").read_text().splitlines() if (match := TABLE_ROW.match(line))]
    table = {(row["file"], int(row["line"]), row["code"]) for row in rows}
    marked = {(str(path.relative_to(EXAMPLES)), line, code) for path in EXAMPLE_FILES for line, code in markers(path)}
    assert sorted(table) == sorted(marked)
    assert len(table) == len(rows), "a finding is listed twice"
    verdicts = {row["verdict"] for row in rows}
    assert verdicts == VERDICTS, "each verdict must be shown at least once, and only those"
