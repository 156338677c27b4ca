"""docs/analysis.md is generated from the table of assumptions: the committed page must be what
the generator makes now."""

from __future__ import annotations

from pathlib import Path

from csan_lint.lint.analysis.assumptions import ASSUMPTIONS
from csan_lint.lint.shell.assumption_docs import COMMAND, render

ANALYSIS_MD = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


def test_analysis_md_is_up_to_date() -> None:
    assert ANALYSIS_MD.read_text() == render(), f"docs/analysis.md is stale: regenerate it with `{COMMAND}`"


def test_every_assumption_has_its_section() -> None:
    sections = render().split("\n## ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == [entry.name for entry in ASSUMPTIONS]
