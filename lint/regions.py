"""Which part of a tensor a basic index reaches: `x[:, 1:n + 1]` and `x[:, :1]` are disjoint.

A halo exchange writes the interior of a padded buffer on one stream and its border rows on
another; the two never touch the same element, so they need no ordering. A region is one
interval per leading dimension, each bound a linear expression of names (`n + 1`, `2 * k`);
two regions are disjoint when, in some dimension, one interval ends where the other starts or
before, by a constant difference. Anything else (a step, a negative index, a tensor index,
`...`) is unknown there and may overlap: regions only ever remove conflicts the analysis can
prove away, as the runtime's strided extents do (runtime/extents.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import libcst as cst

from csan_lint.lint.names import dotted_name

Term = tuple[str, frozenset[str]]
"""A name (`n`, `self.n`), or an expression the sum does not open (`len(x)`, `2 * k`): its dotted
name or code (two terms are the same when spelled the same), and the names it reads."""
Linear = tuple[tuple[tuple[Term, int], ...], int]
"""Sum of terms with integer coefficients, plus a constant: `n + 1` is (((("n", {"n"}), 1),), 1)."""
Interval = tuple[Linear | None, Linear | None]
"""[start, stop) of one dimension; None where unknown (a stop of None is unbounded)."""
Region = tuple[Interval, ...]
"""One interval per leading dimension indexed; dimensions past the last are whole."""

_ZERO: Linear = ((), 0)


def region_of(expr: cst.BaseExpression) -> Region | None:
    """The region `x[...]` reaches of the named tensor `x`; None for a whole tensor, or where
    the index is not one this module can read."""
    if not isinstance(expr, cst.Subscript) or dotted_name(expr.value) is None:
        return None
    intervals = []
    for element in expr.slice:
        interval = _interval(element.slice)
        if interval is None:
            break  # `...`, a tensor index: the rest is unknown
        intervals.append(interval)
    return tuple(intervals) or None


def disjoint(a: Region | None, b: Region | None) -> bool:
    """Whether no element is in both (never for an unknown or whole region)."""
    if a is None or b is None:
        return False
    return any(_apart(left, right) for left, right in zip(a, b, strict=False))


def region_names(region: Region) -> set[str]:
    """The names a region's bounds read (`i` and `n` of `buf[i:n + 1]`, `x` of `buf[:len(x)]`)."""
    return {name for term in _terms(region) for name in term[1]}


def mentions(region: Region | None, name: str) -> bool:
    """Whether a bound of `region` depends on `name` (which a rebinding of it invalidates):
    reads it, or an attribute of it."""
    return region is not None and any(
        read == name or read.startswith(f"{name}.") for term in _terms(region) for read in term[1]
    )


def _terms(region: Region) -> Iterator[Term]:
    for interval in region:
        for bound in interval:
            if bound is not None:
                yield from (term for term, _ in bound[0])


def _apart(a: Interval, b: Interval) -> bool:
    return _at_most(a[1], b[0]) or _at_most(b[1], a[0])


def _at_most(stop: Linear | None, start: Linear | None) -> bool:
    """`stop <= start` for every value of the names: they differ by a constant."""
    if stop is None or start is None or stop[0] != start[0]:
        return False
    return stop[1] <= start[1]


def _interval(index: cst.BaseSlice) -> Interval | None:
    if isinstance(index, cst.Slice):
        if index.step is not None:
            return (None, None)
        start = _ZERO if index.lower is None else _linear(index.lower)
        stop = None if index.upper is None else _linear(index.upper)
        if _negative(start) or _negative(stop):
            return (None, None)
        return (start, stop)
    value = index.value if isinstance(index, cst.Index) else None
    if value is None or isinstance(value, cst.Ellipsis):
        return None
    point = _linear(value)
    if point is None or _negative(point):
        return None  # a tensor or list index gathers; a negative one counts from the end
    return (point, (point[0], point[1] + 1))


def _negative(bound: Linear | None) -> bool:
    return bound is not None and not bound[0] and bound[1] < 0


def _linear(expr: cst.BaseExpression) -> Linear | None:
    """`n + 1`, `2 * k - 1`, `len(x)` (an opaque term): None where it cannot be an integer."""
    terms: Counter[Term] = Counter()
    constant = _collect(expr, 1, terms)
    if constant is None:
        return None
    return tuple(sorted((name, count) for name, count in terms.items() if count)), constant


def _collect(expr: cst.BaseExpression, sign: int, terms: Counter[Term]) -> int | None:
    if isinstance(expr, cst.Integer):
        return sign * int(expr.value, 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _collect(expr.expression, -sign, terms)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        left = _collect(expr.left, sign, terms)
        right = _collect(expr.right, -sign if isinstance(expr.operator, cst.Subtract) else sign, terms)
        return None if left is None or right is None else left + right
    if isinstance(expr, (cst.SimpleString, cst.Float, cst.Imaginary, cst.List, cst.Tuple, cst.Slice)):
        return None
    name = dotted_name(expr)
    terms[(name or cst.Module(body=[]).code_for_node(expr), frozenset(_reads(expr)))] += sign
    return 0


def _reads(expr: cst.CSTNode) -> Iterator[str]:
    """The dotted names an expression reads, each chain whole (`self.n`, not `self`)."""
    if isinstance(expr, (cst.Name, cst.Attribute)) and (name := dotted_name(expr)) is not None:
        yield name
    elif isinstance(expr, cst.Attribute):  # `f().n`: `n` is no name read
        yield from _reads(expr.value)
    elif isinstance(expr, cst.Arg):  # `f(k=v)`: the keyword is no name read
        yield from _reads(expr.value)
    else:
        for child in expr.children:
            yield from _reads(child)
