"""Suite-wide fixtures and options. Area-specific ones live in each tests/<area>/conftest.py."""

from __future__ import annotations

import os

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


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden files are to be rewritten: `--update-golden` or `CSAN_UPDATE_GOLDEN=1`."""
    return bool(request.config.getoption("--update-golden")) or os.environ.get("CSAN_UPDATE_GOLDEN") == "1"
