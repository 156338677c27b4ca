"""Finds the rules in csan_lint.rules by walking the package: adding a rule is adding a file."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from csan_lint import rules as rules_package
from csan_lint.lint.rule import Rule
from csan_lint.lint.syntax import SYNTAX_ERROR_CODE

__all__ = ["SYNTAX_ERROR_CODE", "all_rules", "rule_by_code"]


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code. Codes and names are unique (checked here, once)."""
    found: list[type[Rule]] = []
    for module_info in pkgutil.iter_modules(rules_package.__path__):
        module = importlib.import_module(f"{rules_package.__name__}.{module_info.name}")
        found.extend(
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Rule)
            and value is not Rule
            and value.__module__ == module.__name__
        )
    found.sort(key=lambda rule: rule.code)
    for attribute in ("code", "name"):
        values = [getattr(rule, attribute) for rule in found]
        duplicates = sorted({value for value in values if values.count(value) > 1})
        if duplicates:
            raise RuntimeError(f"duplicate rule {attribute}s in csan_lint.rules: {duplicates}")
    return tuple(found)


def rule_by_code(code: str) -> type[Rule] | None:
    """The rule with this exact code (or kebab name), None if there is none."""
    for rule in all_rules():
        if code in (rule.code, rule.name):
            return rule
    return None
