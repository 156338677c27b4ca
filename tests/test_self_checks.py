"""The project's self-checks keep their promises: mypy is relaxed only where torch is imported,
and the contributors' hooks run offline with the pinned tools and this repository's own hook."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("csan_lint", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _imports_torch(path: Path) -> bool:
    """A module-level `import torch...` or `from torch... import`: lazy imports inside
    functions leave the module torch-free."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "torch" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def _matches(module: str, pattern: str) -> bool:
    """mypy's override patterns: `a.b` exactly, or `a.b.*` for a.b and everything under it."""
    if pattern.endswith(".*"):
        return module == pattern[:-2] or module.startswith(pattern[:-1])
    return module == pattern


def test_mypy_relaxes_only_modules_that_import_torch() -> None:
    """Torch-facing modules that type cleanly (op_plans, unwrap) stay strict."""
    mypy = PYPROJECT["tool"]["mypy"]
    assert mypy["strict"] is True
    (relaxed,) = mypy["overrides"]
    modules = {_module_name(path): path for top in ("lint", "rules", "runtime") for path in (ROOT / top).rglob("*.py")}
    covered = {name for name in modules if any(_matches(name, pattern) for pattern in relaxed["module"])}
    assert covered <= {name for name, path in modules.items() if _imports_torch(path)}
    assert all(_matches(name, "csan_lint.runtime.*") for name in covered), "the static half stays strict"


def test_hooks_are_local_and_run_the_pinned_tools() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [repo["repo"] for repo in config["repos"]] == ["local"], "pre-commit cannot fetch hook repos offline"
    assert {hook["id"] for hook in hooks} == {"ruff", "ruff-format", "mypy", "csan-lint"}
    assert all(hook["language"] == "system" for hook in hooks)
    pins = {pin.split("==")[0] for pin in PYPROJECT["project"]["optional-dependencies"]["test"] if "==" in pin}
    assert {hook["entry"].split()[0] for hook in hooks} - {"csan-lint"} <= pins


def test_the_csan_lint_hook_is_this_repositorys_own() -> None:
    (ours,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (local,) = [hook for repo in config["repos"] for hook in repo["hooks"] if hook["id"] == ours["id"]]
    assert local["entry"] == ours["entry"]
