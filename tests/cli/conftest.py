"""Golden CLI cases: tests/cli/cases/<case>/ holds `cmd` (the arguments, shell-quoted), `tree/`
(the files the command runs in; a path part `dot-x` becomes `.x`, so that fixture `.gitignore`
files do not act on this repository), optionally `stdin` (what the command reads from stdin) and
`expected` (exit code, stdout, stderr; the temporary directory written `[TMP]`).

`pytest --update-golden` (the `update_golden` fixture of tests/conftest.py) rewrites `expected`
from the actual run instead of comparing: review the diff.
"""

from __future__ import annotations

import pytest

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS
from csan_lint.lint.model import NO_SPELLINGS
from csan_lint.lint.shell import runner


@pytest.fixture
def parse_count(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths given to the engine, in order (the cache and project-index tests count parses)."""
    parsed: list[str] = []
    real = runner.lint_source

    def counting(source: str, path: str, rules=None, package=None, spellings=NO_SPELLINGS, assumptions=None, **rest):
        parsed.append(path)
        return real(source, path, rules, package, spellings, assumptions or DEFAULT_ASSUMPTIONS, **rest)

    monkeypatch.setattr(runner, "lint_source", counting)
    return parsed
