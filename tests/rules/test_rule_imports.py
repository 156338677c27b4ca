"""Rules classify: a rule reads the facts the analysis computed once (lint/facts.py), words them
(lint/wording.py) and fixes them (lint/edits.py); it starts no analysis. So a rule imports only
those modules, the rule base, the finding model and the runtime's error kinds; of the modules
that spell code only the helpers named here, and of the table of assumptions only their names
(which a finding says it rests on)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from csan_lint.lint.analysis import assumptions

RULES = Path(__file__).resolve().parents[2] / "rules"
ANY = None
ALLOWED: dict[str, frozenset[str] | None] = {
    "csan_lint.lint.rule": ANY,
    "csan_lint.lint.model": ANY,
    "csan_lint.lint.facts": ANY,
    "csan_lint.lint.wording": ANY,
    "csan_lint.lint.edits": ANY,
    "csan_lint.runtime.kinds": ANY,
    "csan_lint.lint.names": frozenset({"dotted_name"}),
    "csan_lint.lint.values": frozenset({"code_of"}),
    "csan_lint.lint.analysis.tokens": frozenset({"event_name"}),  # how a fact names an event
    "csan_lint.lint.analysis.assumptions": frozenset(
        name for name, value in vars(assumptions).items() if name.isupper() and isinstance(value, str)
    ),
}
"""Module -> the names a rule may import from it (ANY: all of them)."""


def project_imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, imported name or None for `import module`, line) for every import of csan_lint,
    at any depth (in a function, under `if TYPE_CHECKING:`), relative ones resolved."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name.startswith("csan_lint")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = ["csan_lint", "rules"][: 2 - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            if module.startswith("csan_lint"):
                found += [(module, alias.name, node.lineno) for alias in node.names]
    return found


def forbidden(path: Path) -> list[str]:
    problems = []
    for module, name, line in project_imports(path):
        allowed = ALLOWED.get(module, frozenset())
        if name is None or (allowed is not ANY and name not in allowed):
            what = f"import {module}" if name is None else f"from {module} import {name}"
            problems.append(f"{path.name}:{line}: {what}")
    return problems


@pytest.mark.parametrize("path", sorted(RULES.glob("*.py")), ids=lambda path: path.name)
def test_a_rule_imports_only_facts_wording_edits_and_the_rule_base(path: Path) -> None:
    assert forbidden(path) == []


@pytest.mark.parametrize(
    ("line", "reported"),
    [
        ("from csan_lint.lint.hostflow import host_hazards", None),
        ("from csan_lint.lint.deferred import stale_captures", None),
        ("from csan_lint.lint.streamflow import analyse", None),
        ("from csan_lint.lint.names import ImportTable", None),
        ("from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS", None),
        ("import csan_lint.lint.facts", None),
        ("from ..lint.hostflow import host_hazards", "from csan_lint.lint.hostflow import host_hazards"),
    ],
)
def test_the_check_rejects_a_rule_that_reaches_into_the_analysis(
    line: str, reported: str | None, tmp_path: Path
) -> None:
    rule = tmp_path / "some_rule.py"
    rule.write_text(f"from __future__ import annotations\n\n{line}\n")
    assert forbidden(rule) == [f"some_rule.py:3: {reported or line}"]


def test_the_check_accepts_what_a_rule_needs(tmp_path: Path) -> None:
    rule = tmp_path / "some_rule.py"
    rule.write_text(
        "from csan_lint.lint.facts import ModuleFlow\n"
        "from csan_lint.lint.edits import attach\n"
        "from csan_lint.lint.names import dotted_name\n"
        "from ..lint.wording import message_fields\n"
    )
    assert forbidden(rule) == []
