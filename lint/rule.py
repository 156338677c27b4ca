"""The shape every rule in rules/ has: its metadata, docs, examples and check in one class."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from csan_lint.lint.model import Finding, Span

if TYPE_CHECKING:
    from csan_lint.lint.facts import ModuleFlow


@dataclass(frozen=True)
class Valid:
    """Code the rule must leave alone."""

    code: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", textwrap.dedent(self.code).strip("\n") + "\n")


@dataclass(frozen=True)
class Invalid:
    """Code the rule must flag, at exactly these 1-based lines (of the dedented snippet)."""

    code: str
    lines: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", textwrap.dedent(self.code).strip("\n") + "\n")


class Rule:
    """Base class. The class docstring is the rationale (`--explain` and docs/rules.md show it).

    A rule reads the precomputed stream flow of a module; it never walks the CST itself.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    """Kebab-case name of the hazard, reads after "allow": `missing-wait-stream`."""
    summary: ClassVar[str]
    """One line, shown by `--list-rules`."""
    message: ClassVar[str]
    """`str.format` template filled by `finding(**fields)`."""
    fix_title: ClassVar[str]
    """`str.format` template of the remedy, printed as `help:`."""
    confirmed_by: ClassVar[tuple[str, ...]]
    """Runtime error kinds (csan_lint.runtime.kinds) that confirm a finding of this rule."""
    VALID: ClassVar[list[Valid]]
    INVALID: ClassVar[list[Invalid]]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        raise NotImplementedError

    @classmethod
    def rationale(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()

    def finding(
        self,
        path: str,
        *,
        line: int,
        column: int,
        end_line: int,
        end_column: int,
        span: Span,
        assumptions: tuple[str, ...] = (),
        observed: tuple[str, ...] = (),
        **fields: str,
    ) -> Finding:
        """A finding of this rule, message and help filled from the rule's templates;
        `assumptions`: the names of those it rests on; `observed`: the facts from test runs
        it rests on instead (lint/run_facts.py), said in the message too."""
        return Finding(
            path=path,
            line=line,
            column=column,
            code=self.code,
            message=self.message.format(**fields) + "".join(f" ({fact})" for fact in observed),
            end_line=end_line,
            end_column=end_column,
            span=span,
            fix=self.fix_title.format(**fields) if self.fix_title else None,
            assumptions=assumptions,
            observed=observed,
        )
