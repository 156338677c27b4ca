"""The README's rule table and docs/ci.md's format table say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

from csan_lint.lint.registry import all_rules, rule_by_code
from csan_lint.lint.shell.cli import CONFIRM_FORMATS, STATIC_FORMATS

ROOT = Path(__file__).parents[2]


def test_readme_rule_rows_match_the_catalog() -> None:
    rows = re.findall(r"^\| (CSL\d+) \| ([a-z-]+) \| (.+) \|$", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert [code for code, _, _ in rows] == [rule.code for rule in all_rules()], (
        "README's rule table is not the catalog"
    )
    for code, name, summary in rows:
        rule = rule_by_code(code)
        assert rule is not None, f"README lists {code}, which is not a rule"
        assert (rule.name, rule.summary) == (name, summary)


def test_ci_doc_lists_every_format() -> None:
    section = (ROOT / "docs" / "ci.md").read_text().split("## Output formats")[1].split("\n###")[0]
    listed = re.findall(r"^\| `([a-z]+)`(?: \(default\))? \|", section, re.MULTILINE)
    assert sorted(listed) == sorted({*STATIC_FORMATS, *CONFIRM_FORMATS})
