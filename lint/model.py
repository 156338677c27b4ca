"""Plain data shared by the analysis, the reporters and `--confirm`; no libcst, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FixSafety = Literal["safe", "unsafe"]
"""`safe`: `--fix` applies the edits. `unsafe`: only with `--unsafe-fixes`, because the edit
spells the torch API through a module alias or adds an import."""


@dataclass(frozen=True, order=True)
class Span:
    """Lines a finding is about, 1-based and inclusive: the stream block, or the statement."""

    start_line: int
    end_line: int

    def __contains__(self, line: object) -> bool:
        return isinstance(line, int) and self.start_line <= line <= self.end_line


@dataclass(frozen=True, order=True)
class Edit:
    """Insert one statement as a new line before 1-based `line` (one past the last line: at the
    end), indented like the statement that starts at `anchor_line`. Whole-line insertions keep
    the file's formatting and comments as they are."""

    line: int
    anchor_line: int
    text: str
    """The statement, without indentation or newline."""
    scope: int = 0
    """Line of the `def` the statement goes in (0: module level). `--fix` makes one insertion of
    a statement per scope and pass: a join often orders several uses at once, and the next
    pass's lint tells whether the next one is still needed."""


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
    edits: tuple[Edit, ...] = field(default=(), compare=False)
    """The fix as insertions (`--fix`); empty when no edit is certain. Not part of a finding's
    identity: two findings that say the same thing at the same place are one finding."""
    fix_safety: FixSafety = field(default="safe", compare=False)
    assumptions: tuple[str, ...] = field(default=(), compare=False)
    """The analysis' assumptions the finding rests on (lint/analysis/assumptions.py, by name)."""
    observed: tuple[str, ...] = field(default=(), compare=False)
    """Facts from test runs it rests on instead of an assumption (lint/run_facts.py)."""


@dataclass(frozen=True)
class Spellings:
    """A project's own wrappers of the stream API (`[tool.csan-lint]` settings): dotted callables,
    matched against the name as imported (`pkg.cuda_utils.on_stream`) or as written
    (`self.on_stream`); lint/names.py gives each the meaning of its torch.cuda counterpart."""

    stream_contexts: tuple[str, ...] = ()
    """Calls whose value, used in `with`, makes their stream argument current."""
    current_stream: tuple[str, ...] = ()
    """Calls returning the current stream."""
    stream_factories: tuple[str, ...] = ()
    """Calls returning a new stream."""
    event_factories: tuple[str, ...] = ()
    """Calls returning a new event."""
    models: tuple[tuple[str, str], ...] = ()
    """Models of code the linter cannot read (lint/models.py): (dotted callable, the canonical
    name of the stream API entry a call of it acts as)."""

    def leaves(self) -> frozenset[str]:
        """The last name of every wrapper: a file that uses one contains it (the prefilter's words)."""
        every = (
            *self.stream_contexts,
            *self.current_stream,
            *self.stream_factories,
            *self.event_factories,
            *(name for name, _ in self.models),
        )
        return frozenset(name.rpartition(".")[2] for name in every)


NO_SPELLINGS = Spellings()
