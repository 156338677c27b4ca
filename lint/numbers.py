"""Names a function uses as Python numbers, which no kernel reads.

A parameter of unknown type may be a tensor, and reading a tensor is a launch on the current
stream: taking `assert group < self.count` for one hides that an allocation after it is made
before any of this call's work there (lint/callers.py). Some uses say a name is a number: a
test comparing it with a number literal or an attribute (`if step > 0:`, `assert group <
self.count`), `group % 2`, an index or a name computing one (`bufs[i * n + k]`), an argument
of `range`. A name the function also uses as a tensor (`scan.used_as_tensors`) stays one.
Only parameters are asked about (`FunctionAnalysis.run_function`): other names have a known origin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import children
from csan_lint.lint.values import index_names, number_names

_ORDERINGS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)
_Tested = cst.If | cst.While | cst.Assert | cst.IfExp
_TESTED = frozenset({cst.If, cst.While, cst.Assert, cst.IfExp})
_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def used_as_numbers(body: cst.BaseSuite) -> frozenset[str]:
    """The plain names `body` uses as numbers (not those of nested functions and classes).
    Dispatches on the exact node type: this walks every body with parameters, cold runs feel it."""
    numbers: set[str] = set()
    stack: list[cst.CSTNode] = [body]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _SCOPES:
            continue
        if kind in _TESTED:
            numbers.update(_compared_names(cast(_Tested, node).test))
        elif type(node) is cst.BinaryOperation:
            numbers.update(_modulo_of_literal(node))
        elif type(node) is cst.Subscript:
            numbers.update(name for element in node.slice for name in index_names(element.slice) if "." not in name)
        elif type(node) is cst.Call and isinstance(node.func, cst.Name) and node.func.value == "range":
            numbers.update(name for arg in node.args for name in number_names(arg.value) if "." not in name)
        stack.extend(children(node))
    return frozenset(numbers)


def _compared_names(test: cst.BaseExpression) -> Iterator[str]:
    """The names a test orders or equates with a number literal or an attribute, through `and`,
    `or` and `not` (`0 <= i < self.n`: `i`)."""
    stack = [test]
    while stack:
        expr = stack.pop()
        if isinstance(expr, cst.BooleanOperation):
            stack.extend((expr.left, expr.right))
        elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            stack.append(expr.expression)
        elif isinstance(expr, cst.Comparison) and all(isinstance(t.operator, _ORDERINGS) for t in expr.comparisons):
            sides = [expr.left, *(target.comparator for target in expr.comparisons)]
            if any(_number_literal(side) or _attribute(side) for side in sides):
                yield from (side.value for side in sides if isinstance(side, cst.Name))


def _number_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float))


def _attribute(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Attribute) and dotted_name(expr) is not None


def _modulo_of_literal(expr: cst.BinaryOperation) -> Iterator[str]:
    """`group` of `group % 2`."""
    if (
        isinstance(expr.operator, cst.Modulo)
        and isinstance(expr.right, cst.Integer)
        and isinstance(expr.left, cst.Name)
    ):
        yield expr.left.value
