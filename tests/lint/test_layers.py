"""The analysis knows nothing of how it is run: no module of lint/ outside lint/shell/, and no
rule, imports the shell (the command line, discovery, cache, pool, reporters, server), except
for type annotations only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELL = "csan_lint.lint.shell"
CORE = sorted(
    path
    for folder in ("lint", "rules")
    for path in (ROOT / folder).rglob("*.py")
    if (ROOT / "lint" / "shell") not in path.parents
)


def runtime_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of every import not under `if TYPE_CHECKING:`."""
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for statement in block.body
        for node in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def test_the_core_is_found() -> None:
    names = {path.name for path in CORE}
    assert {"hostflow.py", "streamflow.py", "api.py", "missing_join.py"} <= names
    assert "runner.py" not in names


@pytest.mark.parametrize("path", CORE, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_core_module_imports_the_shell(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for line, module in runtime_imports(ast.parse(path.read_text()))
        if module == SHELL or module.startswith(SHELL + ".")
    ]
    assert bad == []


def test_an_import_of_the_shell_is_seen() -> None:
    source = "from csan_lint.lint.shell import runner\nif TYPE_CHECKING:\n    import csan_lint.lint.shell.cache\n"
    tree = ast.parse(source)
    assert [module for _, module in runtime_imports(tree)] == [SHELL, f"{SHELL}.runner"]
