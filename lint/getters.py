"""Getters: a method called on an object the function did not make (`self.store.get(k)`,
`bucket.buffers.flat()`) hands out a tensor that object keeps, which outlives the call like
`self.x` does. A write to it is a write to what the object hands out, keyed as any item of
the object the caller also reaches (`self.store[]`, or `bucket[]` for a parameter), so the
function's summary carries it to its callers and to the object's other getters; the object's
own methods (`self.store.rank_of(p)`) stay host calls on another key."""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst

from csan_lint.lint.analysis.tokens import item_key
from csan_lint.lint.names import dotted_name
from csan_lint.lint.vocabulary import ALLOCATING_METHODS, TENSOR_METHODS, VIEW_METHODS


def getter_holder(value: cst.BaseExpression, params: Collection[str]) -> str | None:
    """The state key of what `value` hands out: any item of the object whose method it calls,
    if that object is an attribute of `self`/`cls` (`self.store[]`) or of a parameter (`p[]`).
    None for anything else, and for a method every tensor has (a view or a new tensor)."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
        return None
    method = value.func.attr.value
    receiver = dotted_name(value.func.value)
    if receiver is None or method in TENSOR_METHODS or method in VIEW_METHODS or method in ALLOCATING_METHODS:
        return None
    root, _, attributes = receiver.partition(".")
    if not attributes:
        return None  # `self.m()`, `p.m()`: the object itself, whose methods are followed or unknown
    if root in ("self", "cls"):
        return item_key(f"{root}.{attributes.split('.', 1)[0]}")
    return item_key(root) if root in params else None
