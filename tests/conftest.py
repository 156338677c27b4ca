"""Suite-wide fixtures and options. Area-specific ones live in each tests/<area>/conftest.py."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def pytest_addoption(parser: pytest.Parser) -> None:
    # Registered here, not in tests/cli/conftest.py: pytest only reads options from conftests
    # loaded at start-up, and the root one always is.
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite the CLI golden files from the actual output instead of comparing.",
    )
