"""`pytest --update-golden` (option registered in tests/conftest.py; `CSAN_UPDATE_GOLDEN=1` works
too) rewrites the fix goldens in tests/fix/cases/ from the actual output: review the diff."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or os.environ.get("CSAN_UPDATE_GOLDEN") == "1"
