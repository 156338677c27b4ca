"""Views: which named tensor an expression is, or is a view of, so that a use, a record or a
hand-over of the view counts for its base's block (one storage, one allocation)."""

from __future__ import annotations

from functools import lru_cache

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.vocabulary import HOST_METHODS, VIEW_ATTRIBUTES, VIEW_METHODS


def viewed(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The named tensor `expr` is (`x`) or is a view of (`x.view(n)`, `x.T`, `x[0]`,
    `x.numpy()`); None if computing `expr` may launch a kernel."""
    base = expr
    while True:
        if isinstance(base, (cst.Name, cst.Attribute)) and dotted_name(base) is not None:
            return base
        if isinstance(base, cst.Attribute) and base.attr.value in VIEW_ATTRIBUTES:
            base = base.value
        elif (
            isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value in VIEW_METHODS
        ):
            base = base.func.value
        elif isinstance(base, cst.Subscript) and all(basic_index(element.slice) for element in base.slice):
            base = base.value
        else:
            return None


_RETURNS_RECEIVER = frozenset(method for method in HOST_METHODS if method.endswith("_"))
"""Metadata methods that change the receiver in place and return it, as torch's `*_` methods do
(`requires_grad_`): no data is read."""


def returned_receiver(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The value `expr` is: `x.requires_grad_()` is `x`."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        if expr.func.attr.value not in _RETURNS_RECEIVER:
            break
        expr = expr.func.value
    return expr


MAY_COPY = frozenset({"contiguous", "reshape", "reshape_as", "numpy"})
"""View methods that may return a copy instead (`viewed` takes them for views)."""


def view_base(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The named tensor whose storage `expr` certainly shares (`x`, `x.view(n)`, `x[0]`, `x.T`);
    None where a method may copy (`x.reshape(n)`) or computing `expr` may launch a kernel."""
    base, node = viewed(expr), expr
    while base is not None and node is not base:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in MAY_COPY:
                return None
            node = node.func.value
        else:
            node = node.value if isinstance(node, (cst.Attribute, cst.Subscript)) else base
    return base


def basic_index(index: cst.BaseSlice) -> bool:
    """`0`, `-1`, `:`, `1:n`: indexing that makes a view (a tensor index gathers: a kernel)."""
    if isinstance(index, cst.Slice):
        return True
    value = index.value if isinstance(index, cst.Index) else None
    if isinstance(value, cst.UnaryOperation):
        value = value.expression
    return isinstance(value, cst.Integer)


@lru_cache(maxsize=4)
def reads_an_item(value: cst.BaseExpression) -> bool:
    """`host[0]`, `host[i, j]`: an item read at once; `host[:n]`, `host[a:b, :m]` (slices only)
    is a view of `host`, read later through its name."""
    return isinstance(value, cst.Subscript) and not all(isinstance(e.slice, cst.Slice) for e in value.slice)
