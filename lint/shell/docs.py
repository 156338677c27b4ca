"""docs/rules.md, generated from the rule catalog: `python -m csan_lint.lint.shell.docs > docs/rules.md`.

Everything comes from the rule classes (code, name, summary, rationale, examples, `confirmed_by`)
and from running the linter on their first flagged example: its `help:` and, for rules with an
autofix, what `--fix` makes of it. The page cannot claim a fix the code does not make.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Finding
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.shell.fix import fix_source, unified_diff

COMMAND = "python -m csan_lint.lint.shell.docs > docs/rules.md"
_EXAMPLE = "example.py"
_INTRODUCTION = (
    "Each rule reads the stream flow of a function (csan_lint.lint.streamflow) and reports one "
    "kind of ordering bug. `csan-lint --explain CODE` prints a rule's section in the terminal; "
    "`csan-lint --confirm` runs the tests that reach a finding under the runtime sanitizer, and "
    "the *confirmed by* kinds are the sanitizer's reports that confirm it. "
    "`csan-lint --fix` applies the autofixes marked *safe*; `--unsafe-fixes` adds those that "
    "must spell `torch.cuda` through a module alias or add `import torch`; `--diff` shows them "
    "without writing."
)


def render(rules: Sequence[type[Rule]]) -> str:
    """The whole page: an index table, then one section per rule."""
    parts = [
        "# Rules",
        f"<!-- Generated from the rule catalog by `{COMMAND}`; do not edit by hand. -->",
        _INTRODUCTION,
        _index(rules),
        *(_section(rule) for rule in rules),
    ]
    return "\n\n".join(parts) + "\n"


def _index(rules: Sequence[type[Rule]]) -> str:
    rows = ["| code | name | summary | autofix |", "| --- | --- | --- | --- |"]
    for rule in rules:
        autofix = "yes" if _fixed_example(rule) is not None else "no"
        rows.append(f"| [{rule.code}](#{rule.code.lower()}-{rule.name}) | `{rule.name}` | {rule.summary} | {autofix} |")
    return "\n".join(rows)


def _section(rule: type[Rule]) -> str:
    parts = [f"## {rule.code} {rule.name}", f"{rule.summary[:1].upper()}{rule.summary[1:]}."]
    rationale = rule.rationale()
    if rationale:
        parts.append(rationale.replace("## ", "### "))
    if rule.INVALID:
        parts.append("### Example (flagged)\n\n" + _code_block(rule.INVALID[0].code))
        helps = [finding.fix for finding in _findings(rule, rule.INVALID[0].code) if finding.fix]
        if helps:
            parts.append(f"The finding's help: {helps[0]}.")
    if rule.VALID:
        parts.append("### Use instead\n\n" + _code_block(rule.VALID[0].code))
    parts.append("### Autofix\n\n" + _autofix(rule))
    confirmed = ", ".join(f"`{kind}`" for kind in rule.confirmed_by) or "nothing (static only)"
    parts.append(f"### Confirmed by\n\n{confirmed}")
    return "\n\n".join(parts)


def _autofix(rule: type[Rule]) -> str:
    fixed = _fixed_example(rule)
    if fixed is None:
        return "None: no edit is certain to order the hazard; follow the `help:`."
    source, after, unsafe = fixed
    how = "`csan-lint --fix --unsafe-fixes`" if unsafe else "`csan-lint --fix`"
    return f"{how} makes this change to a flagged example:\n\n```diff\n{unified_diff(source, after, _EXAMPLE)}```"


def _fixed_example(rule: type[Rule]) -> tuple[str, str, bool] | None:
    """The first flagged example that has a fix of this rule: (source, fixed source, unsafe)."""
    for example in rule.INVALID:
        own = [finding for finding in _findings(rule, example.code) if finding.edits]
        if own:
            unsafe = all(finding.fix_safety == "unsafe" for finding in own)
            return example.code, fix_source(example.code, _EXAMPLE, [rule], unsafe=unsafe).source, unsafe
    return None


def _findings(rule: type[Rule], code: str) -> list[Finding]:
    return lint_source(code, _EXAMPLE, [rule])


def _code_block(code: str) -> str:
    return f"```python\n{code}```"


def main() -> None:
    sys.stdout.write(render(all_rules()))


if __name__ == "__main__":
    main()
