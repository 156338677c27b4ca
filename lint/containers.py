"""Containers: what iterating, filtering and pairing them gives (the names a `for` binds, the
container each item comes from, the object a filtered list holds the items of), for both the
values of one function (lint/values.py) and its accesses (lint/accesses.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import libcst as cst

from csan_lint.lint.analysis.tokens import UNKNOWN, item_key
from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import target_names

Comprehension = cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def object_root(expr: cst.BaseExpression) -> str | None:
    """The name an object is reached from: `items` of `items`, `items[1:]`, `items.values()`,
    `state.items`."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        elif isinstance(expr, (cst.Subscript, cst.Attribute)):
            expr = expr.value
        else:
            return expr.value if isinstance(expr, cst.Name) else None


def items_of(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The object whose items `expr` holds: `xs` of `[x for x in xs if c]`, `xs[1:]`; else `expr`."""
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
        item = object_root(expr.elt)
        return expr.for_in.iter if item is not None and item in set(target_names(expr.for_in.target)) else expr
    return expr


def made_by_comprehension(call: cst.Call) -> cst.GeneratorExp | cst.ListComp | None:
    """The comprehension `list(...)` or `tuple(...)` is given alone, if it is."""
    func, args = call.func, call.args
    if isinstance(func, cst.Name) and func.value in ("list", "tuple") and len(args) == 1 and args[0].keyword is None:
        given = args[0].value
        return given if isinstance(given, (cst.GeneratorExp, cst.ListComp)) else None
    return None


def loop_tensors(target: cst.BaseExpression, iterable: cst.BaseExpression) -> set[str]:
    """Names a `for` target binds that may be tensors: not the numbers of `range(...)`, nor the
    index `enumerate(...)` pairs with each item."""
    func = iterable.func if isinstance(iterable, cst.Call) else None
    if isinstance(func, cst.Name) and func.value == "range":
        return set()
    if isinstance(func, cst.Name) and func.value == "enumerate" and isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements[1:] for name in target_names(element.value)}
    return set(target_names(target))


def iterated_items(target: cst.BaseExpression, iterable: cst.BaseExpression) -> Iterator[tuple[str, str]]:
    """(name, container) for each name a `for` binds to an item of a named container: `for x in
    xs`, the items of `enumerate(xs)`, each of `zip(xs, ys)` with its own container."""
    func = iterable.func if isinstance(iterable, cst.Call) else None
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target, iterable)]
    if isinstance(func, cst.Name) and isinstance(iterable, cst.Call) and isinstance(target, (cst.Tuple, cst.List)):
        names, args = [element.value for element in target.elements], [arg.value for arg in iterable.args]
        if func.value == "enumerate" and len(names) == 2 and args:
            pairs = [(names[1], args[0])]
        elif func.value == "zip" and len(names) == len(args):
            pairs = list(zip(names, args, strict=True))
    for name, container in pairs:
        key = dotted_name(container)
        if isinstance(name, cst.Name) and key is not None:
            yield name.value, key


def paired_containers(iterable: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """What `enumerate(xs)` or `zip(xs, ys)` goes through (`[xs]`, `[xs, ys]`); None for any
    other iterable."""
    func = iterable.func if isinstance(iterable, cst.Call) else None
    if not (isinstance(iterable, cst.Call) and isinstance(func, cst.Name) and func.value in ("enumerate", "zip")):
        return None
    positional = [arg.value for arg in iterable.args if arg.keyword is None and not arg.star]
    return positional[:1] if func.value == "enumerate" else positional


def paired(
    targets: Sequence[cst.BaseExpression], value: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.BaseExpression]] | None:
    """`x, z = a, b`: each target with its own value; None unless one tuple meets one of equal length."""
    if (
        len(targets) != 1
        or not isinstance(targets[0], (cst.Tuple, cst.List))
        or not isinstance(value, (cst.Tuple, cst.List))
    ):
        return None
    names, values = targets[0].elements, value.elements
    if len(names) != len(values) or any(isinstance(e, cst.StarredElement) for e in (*names, *values)):
        return None
    return [(name.value, element.value) for name, element in zip(names, values, strict=True)]


def comprehension_targets(node: Comprehension) -> set[str]:
    targets: set[str] = set()
    comp: cst.CompFor | None = node.for_in
    while comp is not None:
        targets.update(target_names(comp.target))
        comp = comp.inner_for_in
    return targets


def joined_stream_collections(expr: cst.BinaryOperation, streams: Mapping[str, str]) -> tuple[str, ...]:
    """`comm_pool + copy_pool` of collections of streams (`streams`: the bindings, an item of
    `c` at `item_key(c)`): what an item of the sum may be, an item of either (empty: not such a
    sum). Walked, not recursed: a long chain of `+` is as deep as it is long."""
    operands: list[cst.BaseExpression] = []
    node: cst.BaseExpression = expr
    while isinstance(node, cst.BinaryOperation):
        if not isinstance(node.operator, cst.Add):
            return ()
        operands.append(node.right)
        node = node.left
    parts = []
    for operand in (node, *reversed(operands)):
        key = dotted_name(operand)
        item = streams.get(item_key(key)) if key is not None else None
        if item is None or item == UNKNOWN:
            return ()
        parts.append(item)
    return tuple(parts)
