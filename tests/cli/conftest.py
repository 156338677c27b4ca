"""Golden CLI cases: tests/cli/cases/<case>/ holds `cmd` (the arguments, shell-quoted), `tree/`
(the files the command runs in; a path part `dot-x` becomes `.x`, so that fixture `.gitignore`
files do not act on this repository) and `expected` (exit code, stdout, stderr; the temporary
directory written `[TMP]`).

`pytest tests/cli --update-golden` (or `CSAN_UPDATE_GOLDEN=1 pytest ...` from anywhere: pytest
registers this conftest's option only when it is loaded at start-up, i.e. when tests/cli is named
on the command line) rewrites `expected` from the actual run instead of comparing: review the diff.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    option = request.config.getoption("--update-golden", default=False)
    return bool(option) or os.environ.get("CSAN_UPDATE_GOLDEN") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite the CLI golden files from the actual output.")
