"""Suite-wide fixtures. Area-specific ones live in each tests/<area>/conftest.py."""

pytest_plugins = ["pytester"]
