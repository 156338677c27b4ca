"""Suite-wide fixtures and options. Area-specific ones live in each tests/<area>/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def pytest_addoption(parser: pytest.Parser) -> None:
    # Registered here, not in an area conftest: pytest only reads options from conftests
    # loaded at start-up, and the root one always is.
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite the golden files (CLI cases, fix cases) from the actual output instead of comparing.",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.requires_cuda`: the test needs a real CUDA GPU (the GPU check,
    benchmarks/gpu/check.sh, runs them); skipped elsewhere. Asked at collection, before any
    test activates the emulated device."""
    marked = [item for item in items if item.get_closest_marker("requires_cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU (benchmarks/gpu/check.sh runs it)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden files are to be rewritten: `--update-golden` or `CSAN_UPDATE_GOLDEN=1`."""
    return bool(request.config.getoption("--update-golden")) or os.environ.get("CSAN_UPDATE_GOLDEN") == "1"


ConfirmRun = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def run_confirm() -> ConfirmRun:
    """`csan-lint app/ --confirm` run as a user runs it, in a copy of a fixture project, on the
    emulated device: `run_confirm(project, *options, output="json")`."""

    def run(project: Path, *options: str, output: str = "json") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "csan_lint", "app/", "--confirm", "--device", "emulated", "--format", output]
        return subprocess.run([*command, *options], cwd=project, capture_output=True, text=True, timeout=300)

    return run
