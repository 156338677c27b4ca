"""A lint whose slow part is left running while `--confirm` starts its tests.

What the tests are chosen by is the set of files with stream code (and those with findings): on a
big tree it is known long before the engine has analysed those files. So `--confirm`'s static
pass comes in two stages: first the files the prefilter keeps are parsed only far enough to
say whether they hold stream code (`recognize.holds_stream_code`); those that do are analysed
in the background, with the syntax checks of the files the prefilter rejected, and the rest
now. `StagedLint.first` is the first stage; `result()` waits for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from csan_lint.lint.model import Finding

if TYPE_CHECKING:
    from csan_lint.lint.shell.pool import Dealt
    from csan_lint.lint.shell.runner import LintResult

Finish = Callable[[list[Any]], tuple[list[Finding], dict[str, frozenset[int]]]]
"""Turns the background jobs' outcomes, in order, into findings and stream code lines, storing
them in the cache (and writing it)."""


class StagedLint:
    """A lint whose syntax checks and stream-code files' analyses may still be running in worker
    processes: on a big tree most of a cold run's CPU is libcst's parse and the engine's
    analysis of the stream code, and most of the rest CPython's parser checking the files no
    rule needs to see; what `--confirm` selects its tests by depends on neither. A context
    manager: leaving it stops what is still running."""

    def __init__(
        self,
        first: LintResult,
        background: Dealt[Any, Any] | None,
        finish: Finish,
        *,
        analysing: frozenset[str] = frozenset(),
        checking: int = 0,
    ) -> None:
        self.first = first
        """Everything but the background jobs': the findings and stream code lines of the files
        analysed now, and `analysing`, the files known to hold stream code."""
        self.analysing = analysing
        """Absolute paths of the files that hold stream code, whose findings and lines `result()` has."""
        self._checking = checking
        self._background = background
        self._finish = finish
        self._result: LintResult | None = None

    @property
    def checking(self) -> int:
        """Files whose syntax check is still running in the background (0 once `result()` returned)."""
        return self._checking if self._result is None else 0

    def result(self) -> LintResult:
        """The whole lint, as `lint_paths` gives it: waits for the background jobs, then stores
        them in the cache and writes it."""
        if self._result is None:
            outcomes = self._background.results() if self._background is not None else []
            findings, lines = self._finish(outcomes)
            self._result = replace(
                self.first,
                findings=sorted([*self.first.findings, *findings], key=finding_order),
                stream_code={**self.first.stream_code, **lines},
            )
        return self._result

    def __enter__(self) -> StagedLint:
        return self

    def __exit__(self, *exception: object) -> None:
        if self._background is not None:
            self._background.cancel()


def finding_order(finding: Finding) -> tuple[str, int, int, str]:
    return finding.path, finding.line, finding.column, finding.code
