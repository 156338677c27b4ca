"""Sanitizer tests: the `slow` label for the ones that start a Python (and torch) subprocess."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts subprocesses that import torch (run by default)")
