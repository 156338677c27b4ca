"""csan-lint: CUDA stream synchronization bugs, found statically and confirmed at run time."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it from here. A literal, not an
importlib.metadata lookup, which would cost every start-up (each pre-commit run) ~25 ms."""

REPOSITORY_URL = "https://github.com/csan-lint/csan-lint"
"""Where the source and docs/ live: SARIF's `informationUri`, each rule's `helpUri`, `--explain`."""
