"""Plain data shared by the analysis, the reporters and `--confirm`; no libcst, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Span:
    """Lines a finding is about, 1-based and inclusive: the stream block, or the statement."""

    start_line: int
    end_line: int

    def __contains__(self, line: object) -> bool:
        return isinstance(line, int) and self.start_line <= line <= self.end_line


@dataclass(frozen=True, order=True)
class Finding:
    """One diagnostic. Line and column are 1-based (LibCST's 0-based column is converted once)."""

    path: str
    line: int
    column: int
    code: str
    message: str
    end_line: int
    end_column: int
    span: Span
    fix: str | None = None
    """The remedy, printed as `help:`; None when the rule has nothing certain to suggest."""
