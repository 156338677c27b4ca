"""docs/rules.md is generated from the rule catalog: the committed page must be what the
generator makes now, and say what each rule is, does, fixes and is confirmed by."""

from __future__ import annotations

from pathlib import Path

from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.docs import COMMAND, render

RULES_MD = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def test_rules_md_is_up_to_date() -> None:
    assert RULES_MD.read_text() == render(all_rules()), f"docs/rules.md is stale: regenerate it with `{COMMAND}`"


def test_every_rule_has_its_section_with_examples_autofix_and_confirmation() -> None:
    page = render(all_rules())
    sections = page.split("\n## ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == [f"{rule.code} {rule.name}" for rule in all_rules()]
    for rule, section in zip(all_rules(), sections, strict=True):
        assert rule.INVALID[0].code in section and rule.VALID[0].code in section
        assert "### Autofix" in section and "### Confirmed by" in section
        for kind in rule.confirmed_by:
            assert f"`{kind}`" in section.split("### Confirmed by", 1)[1]


def test_autofix_claims_follow_the_code() -> None:
    """A rule listed with an autofix shows a diff that adds lines; one without says so."""
    page = render(all_rules())
    for rule, section in zip(all_rules(), page.split("\n## ")[1:], strict=True):
        autofix = section.split("### Autofix", 1)[1].split("###", 1)[0]
        row = next(line for line in page.splitlines() if line.startswith(f"| [{rule.code}]"))
        if row.endswith("| yes |"):
            assert "```diff" in autofix and "\n+" in autofix and "\n-    " not in autofix
        else:
            assert row.endswith("| no |") and autofix.strip().startswith("None:")
    assert {line.split("|")[1].strip()[1:7] for line in page.splitlines() if line.endswith("| yes |")} >= {
        "CSL101",
        "CSL102",
        "CSL201",
    }
