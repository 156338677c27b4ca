"""Every rule's inline examples are its tests: VALID stays clean, INVALID is flagged exactly."""

from __future__ import annotations

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Invalid, Rule, Valid

CASES = [
    pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}")
    for rule in all_rules()
    for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
    for index, example in enumerate(examples)
]


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_example(rule: type[Rule], example: Valid | Invalid) -> None:
    findings = [finding for finding in lint_source(example.code, "example.py") if finding.code == rule.code]
    if isinstance(example, Valid):
        assert findings == []
    else:
        assert [finding.line for finding in findings] == list(example.lines)


@pytest.mark.parametrize(("rule", "example"), [case for case in CASES if isinstance(case.values[1], Invalid)])
def test_invalid_findings_carry_span_and_fix(rule: type[Rule], example: Invalid) -> None:
    """H7 matches runtime reports by span; the span must contain the offending line."""
    for finding in lint_source(example.code, "example.py", rules=[rule]):
        assert finding.line in finding.span
        assert finding.fix
        assert (finding.end_line, finding.end_column) > (finding.line, finding.column)
