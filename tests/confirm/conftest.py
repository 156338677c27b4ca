"""fixture_project/ is a separate project that the --confirm tests run; never collect it here."""

from __future__ import annotations

import pytest

collect_ignore = ["fixture_project"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than ~20 s (subprocesses, timeouts); still run by default")
