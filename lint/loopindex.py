"""What a counted loop's index says about the tests in its body.

`for i in range(a, b)` with a literal `a`: on the pass where `i` is `a + p` a test of `i`
against a literal is decided (`if i > 1:` is false on the first two passes), and on every pass
but the last `i < b - 1` holds (spelled `i < n` where `b` is `n + 1`). The interpreter runs
such a loop's first passes and its last one apart, so a record made under `if i < n:` in one
pass is seen by a wait under `if i > 1:` in the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from csan_lint.lint.nodes import descendants

MAX_PEELED = 4
"""Passes run apart at most: tests against larger literals stay undecided."""


@dataclass(frozen=True)
class CountedLoop:
    index: str
    start: int
    last: str
    """The source of `b - 1`, the index's value on the last pass, as the tests spell it."""
    peeled: int
    """Passes to run apart: up to the largest literal the body compares the index with."""


@dataclass(frozen=True)
class IndexFacts:
    """The index's value on this pass (None: some pass after the peeled ones, `at_least`), and
    whether this is the last pass."""

    index: str
    value: int | None
    at_least: int
    final: str
    """The spelling of the index's value on the last pass (`CountedLoop.last`)."""
    last: bool


def counted_loop(loop: cst.For) -> CountedLoop | None:
    """The loop's counting, if its body tests its index (else None: nothing to decide)."""
    call, target = loop.iter, loop.target
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "range"):
        return None
    if not isinstance(target, cst.Name) or not 1 <= len(call.args) <= 2:
        return None
    args = [arg.value for arg in call.args]
    start = integer(args[0]) if len(args) == 2 else 0
    if start is None:
        return None
    end = args[-1]
    last = (
        _source(end.left)
        if isinstance(end, cst.BinaryOperation) and isinstance(end.operator, cst.Add) and integer(end.right) == 1
        else f"{_source(end)} - 1"
    )
    literals = list(_tested_literals(loop.body, target.value))
    if not literals and not any(True for _ in _tests(loop.body, target.value, last)):
        return None
    peeled = max(0, min(MAX_PEELED, max(literals, default=start - 1) - start + 1))
    return CountedLoop(target.value, start, last, peeled)


def index_fact(test: cst.BaseExpression, facts: IndexFacts | None) -> bool | None:
    """The truth of `test` on a pass described by `facts`; None where it is not decided."""
    if facts is None or not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    left, [comparison] = test.left, test.comparisons
    if not (isinstance(left, cst.Name) and left.value == facts.index):
        return None
    operator, right = type(comparison.operator), comparison.comparator
    literal = integer(right)
    if literal is not None:
        return _against_literal(operator, literal, facts)
    if _source(right) != facts.final:
        return None
    on_last: dict[type[cst.BaseCompOp], bool] = {
        cst.LessThan: not facts.last,
        cst.Equal: facts.last,
        cst.GreaterThanEqual: facts.last,
    }
    return on_last.get(operator)


def _against_literal(operator: type[cst.BaseCompOp], literal: int, facts: IndexFacts) -> bool | None:
    if facts.value is not None:
        value = facts.value
        exact: dict[type[cst.BaseCompOp], bool] = {
            cst.LessThan: value < literal,
            cst.LessThanEqual: value <= literal,
            cst.GreaterThan: value > literal,
            cst.GreaterThanEqual: value >= literal,
            cst.Equal: value == literal,
            cst.NotEqual: value != literal,
        }
        return exact.get(operator)
    low = facts.at_least
    known: dict[type[cst.BaseCompOp], bool | None] = {
        cst.GreaterThan: True if low > literal else None,
        cst.GreaterThanEqual: True if low >= literal else None,
        cst.LessThan: False if low >= literal else None,
        cst.LessThanEqual: False if low > literal else None,
        cst.Equal: False if low > literal else None,
        cst.NotEqual: True if low > literal else None,
    }
    return known.get(operator)


def _tests(node: cst.CSTNode, index: str, last: str) -> Iterator[cst.Comparison]:
    """Comparisons of `index` with the last pass's value, anywhere under `node`."""
    for comparison in _index_comparisons(node, index):
        if _source(comparison.comparisons[0].comparator) == last:
            yield comparison


def _tested_literals(node: cst.CSTNode, index: str) -> Iterator[int]:
    for comparison in _index_comparisons(node, index):
        literal = integer(comparison.comparisons[0].comparator)
        if literal is not None:
            yield literal


def _index_comparisons(node: cst.CSTNode, index: str) -> Iterator[cst.Comparison]:
    for current in descendants(node):
        if (
            type(current) is cst.Comparison
            and len(current.comparisons) == 1
            and isinstance(current.left, cst.Name)
            and current.left.value == index
        ):
            yield current


def integer(expr: cst.BaseExpression) -> int | None:
    """The value of an integer literal, negative ones included; None for anything else."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        value = integer(expr.expression)
        return -value if value is not None else None
    return expr.evaluated_value if isinstance(expr, cst.Integer) else None


def _source(node: cst.CSTNode) -> str:
    """The expression as written, to compare two spellings of one bound."""
    return cst.Module(body=[]).code_for_node(node)
