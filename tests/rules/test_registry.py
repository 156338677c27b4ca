"""Invariants every rule in the catalog keeps, checked over whatever rules/ contains."""

from __future__ import annotations

import re

import pytest

from csan_lint.lint.registry import all_rules, rule_by_code
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.runtime.kinds import ALL_KINDS

RULES = [pytest.param(rule, id=rule.code) for rule in all_rules()]


def test_catalog_has_the_ordering_and_lifetime_rules() -> None:
    assert {"CSL101", "CSL102", "CSL103", "CSL201"} <= {rule.code for rule in all_rules()}


def test_codes_and_names_are_unique() -> None:
    codes = [rule.code for rule in all_rules()]
    names = [rule.name for rule in all_rules()]
    assert len(codes) == len(set(codes))
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", RULES)
def test_metadata(rule: type[Rule]) -> None:
    assert re.fullmatch(r"CSL\d{3}", rule.code)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)+", rule.name)
    assert rule.summary and "\n" not in rule.summary
    assert rule.confirmed_by and set(rule.confirmed_by) <= set(ALL_KINDS)
    assert rule_by_code(rule.code) is rule and rule_by_code(rule.name) is rule


@pytest.mark.parametrize("rule", RULES)
def test_rationale_sections(rule: type[Rule]) -> None:
    rationale = rule.rationale()
    sections = ("## What it does", "## Why is this bad?", "## Assumptions", "## Known problems")
    positions = [rationale.find(section) for section in sections]  # what is taken as given, what is not seen
    assert -1 not in positions and positions == sorted(positions)


@pytest.mark.parametrize("rule", RULES)
def test_examples_present(rule: type[Rule]) -> None:
    assert rule.VALID and all(isinstance(example, Valid) for example in rule.VALID)
    assert rule.INVALID and all(isinstance(example, Invalid) and example.lines for example in rule.INVALID)


@pytest.mark.parametrize("rule", RULES)
def test_rule_file_is_named_after_the_rule(rule: type[Rule]) -> None:
    assert rule.__module__.rsplit(".", 1)[1] == rule.name.replace("-", "_")
