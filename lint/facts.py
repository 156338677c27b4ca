"""What the analysis tells the rules: one module's facts (`ModuleFlow`), each computed once
(lint/analysis/driver.py), and the types of those facts.

A rule reads these and words them; it starts no analysis (tests/rules/test_rule_imports.py
says which modules a rule may import). The stream hazards' types live with the ordering model
(lint/ordering.py) and are named here for the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import libcst as cst
from libcst.metadata import CodeRange

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.analysis.tokens import CURRENT
from csan_lint.lint.analysis.uses import NO_USES, ModuleUses
from csan_lint.lint.hoststate import Copy
from csan_lint.lint.model import NO_SPELLINGS, Span, Spellings
from csan_lint.lint.names import ImportTable
from csan_lint.lint.ordering import Hazard, HazardKind, Missing
from csan_lint.lint.positions import Positions, positions
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts

__all__ = [
    "CURRENT",
    "Copy",
    "Hazard",
    "HazardKind",
    "HostHazard",
    "Location",
    "Missing",
    "ModuleFlow",
    "StaleCapture",
]


class Location(TypedDict):
    """`Rule.finding()`'s position arguments, and the assumptions the finding there rests on."""

    line: int
    column: int
    end_line: int
    end_column: int
    span: Span
    assumptions: tuple[str, ...]
    observed: tuple[str, ...]


@dataclass(frozen=True)
class HostHazard:
    """One host-side hazard (lint/hostflow.py): `kind` is the runtime error kind that would confirm it."""

    kind: str
    node: cst.CSTNode
    """Where the finding points: the host access, the wait, `capture_begin`, the side block's item."""
    span_node: cst.CSTNode
    fields: tuple[tuple[str, str], ...]
    """Raw message fields: names as written, streams as tokens (`<current>`); lint/wording.py words them."""
    copies: frozenset[Copy] = frozenset()
    """The pending copies a host access races with (several after a join): the first in the
    source is named, chosen by position once positions are known, never by node identity."""
    assumptions: frozenset[str] = frozenset()
    """What the hazard rests on (lint/analysis/assumptions.py)."""
    observed: frozenset[str] = frozenset()
    """The facts from test runs it rests on instead of an assumption (lint/run_facts.py)."""


@dataclass(frozen=True)
class StaleCapture:
    """A callable built with the current stream fixed in it, that leaves its function (lint/deferred.py)."""

    name: str
    """The callable as the message names it: `'name'` it is bound to, else `a lambda`, `'partial(f, ...)'`."""
    capture: cst.BaseExpression
    """The expression that holds the stream of build time (the report's position)."""
    built: cst.CSTNode
    """The `partial(...)` call, the lambda or the nested `def`."""
    escape: cst.CSTNode
    """Where it leaves the function: the storing, passing or returning statement or call."""
    how: str
    """How it leaves: "stored in 'self.fn'", "passed to 'store.put'", "returned"."""


@dataclass
class ModuleFlow:
    """What the rules read: the module's facts, and where its nodes are (computed on demand)."""

    path: str
    module: cst.Module
    hazards: list[Hazard]
    """Stream hazards: an access not ordered after a conflicting one (lint/streamflow.py)."""
    _positions: Mapping[cst.CSTNode, CodeRange] | Positions | None = field(default=None, repr=False)
    uses: ModuleUses = field(default=NO_USES, repr=False)
    """What the module's code does with the stream API, and where (lint/analysis/uses.py)."""
    spellings: Spellings = field(default=NO_SPELLINGS, repr=False)
    """The project's own wrappers of the stream API."""
    imports: ImportTable = field(default_factory=ImportTable, repr=False)
    functions: Sequence[tuple[str, cst.FunctionDef]] = field(default=(), repr=False)
    """Every function of the module, nested ones too, as lint/scan.py read them."""
    host_hazards: tuple[HostHazard, ...] = ()
    """Host-side hazards: pending copies, unrecorded events, captures (lint/hostflow.py)."""
    stale_captures: tuple[StaleCapture, ...] = ()
    """Callables that fix the current stream when built and run later (lint/deferred.py)."""
    assumptions: Assumptions = field(default=DEFAULT_ASSUMPTIONS, repr=False)
    """What the analysis was told to assume (lint/analysis/assumptions.py)."""
    observed: ModuleFacts = field(default=NO_MODULE_FACTS, repr=False)
    """What test runs saw of the module's functions (lint/run_facts.py), settling assumptions."""

    def range(self, node: cst.CSTNode) -> CodeRange:
        if self._positions is None:
            self._positions = positions(self.module)
        return self._positions[node]

    def location(self, hazard: Hazard | HostHazard) -> Location:
        """`finding()` keyword arguments: the access's 1-based position, the span of its block
        (or statement), the assumptions the hazard rests on and the observed facts that
        replaced one (a parameter, or its `.grad`, a run saw come written by the caller)."""
        assumed: tuple[str, ...] = ()
        observed: tuple[str, ...] = ()
        if isinstance(hazard, HostHazard):
            node, span_node = hazard.node, hazard.span_node
            assumed, observed = tuple(sorted(hazard.assumptions)), tuple(sorted(hazard.observed))
        else:
            node, span_node = hazard.access.node, hazard.access.span_node
            assumed = tuple(sorted(hazard.assumptions))
            if hazard.produced == "by the caller":
                fact = self.observed.written_argument(hazard.function, hazard.tensor)
                observed = (fact,) if fact is not None else ()
        where, span = self.range(node), self.range(span_node)
        return {
            "line": where.start.line,
            "column": where.start.column + 1,
            "end_line": where.end.line,
            "end_column": where.end.column + 1,
            "span": Span(span.start.line, span.end.line),
            "assumptions": assumed,
            "observed": observed,
        }

    def line(self, node: cst.CSTNode) -> int:
        return self.range(node).start.line
