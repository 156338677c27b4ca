"""Golden CLI cases: tests/cli/cases/<case>/ holds `cmd` (the arguments, shell-quoted), `tree/`
(the files the command runs in; a path part `dot-x` becomes `.x`, so that fixture `.gitignore`
files do not act on this repository) and `expected` (exit code, stdout, stderr; the temporary
directory written `[TMP]`).

`pytest --update-golden` (option registered in tests/conftest.py; `CSAN_UPDATE_GOLDEN=1` works
too) rewrites `expected` from the actual run instead of comparing: review the diff.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    option = request.config.getoption("--update-golden")
    return bool(option) or os.environ.get("CSAN_UPDATE_GOLDEN") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than ~20 s (subprocesses, pre-commit); still run by default")
