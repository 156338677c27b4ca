"""Hand-over through `self`: a method of the class that gives the items of a container kept on
`self` back to its caller (an offloader's `tensor_pop`), read from the methods' text.

A tensor one method allocates on a side stream and stores in `self.c[k]` is used and dropped
by whoever that method hands it to, on their own stream: the side stream's allocator may reuse
the block as soon as it is dropped (CSL201), unless the hand-over records the caller's stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.scan import is_public, record_stream_calls, records_streams

_TAKING = ("pop", "popleft", "get")
"""Container methods that give an item back (`self.c.pop(k)`, `self.c.get(k)`)."""


def handed_out(
    owner: str,
    container: str,
    functions: Mapping[str, cst.FunctionDef],
    classes: Mapping[str, Sequence[str]],
) -> tuple[str, cst.Return] | None:
    """The public method of `owner` (its own or inherited from a class of the module, as a call
    on the object reaches it) that returns an item of `container` (`self.c`) with no
    `record_stream` anywhere in it, and that `return`; None if there is none."""
    seen: set[str] = set()
    stack = [owner]
    while stack:
        cls = stack.pop()
        prefix = f"{cls}."
        for name, function in functions.items():
            method = name.removeprefix(prefix)
            if not name.startswith(prefix) or "." in method or method in seen:
                continue
            seen.add(method)
            found = _returned_item(function, container) if is_public(method) and method != "__init__" else None
            if found is not None:
                return method, found
        stack.extend(reversed(classes.get(cls, ())))
    return None


def records(function: cst.FunctionDef, name: str) -> bool:
    """Whether `function` calls `name.record_stream(...)` (or `*record_stream(name, ...)`)
    anywhere: wherever it stands, it may record the caller's stream."""
    for call in record_stream_calls(function):
        func = call.func
        recorded = func.value if isinstance(func, cst.Attribute) else call.args[0].value if call.args else None
        if recorded is not None and dotted_name(recorded) == name:
            return True
    return False


def _returned_item(function: cst.FunctionDef, container: str) -> cst.Return | None:
    """A `return` of `self.c[k]`, `self.c.pop(k)`, `self.c.get(k)`, or of a name bound to one;
    None if the method calls `record_stream` (it may record the caller's stream)."""
    if records_streams(function):
        return None
    finder = _Finder(container)
    function.body.visit(finder)
    for node in finder.returns:
        value = node.value
        if value is not None and (_is_item(value, container) or dotted_name(value) in finder.items):
            return node
    return None


def _is_item(expr: cst.BaseExpression, container: str) -> bool:
    if isinstance(expr, cst.Subscript):
        return dotted_name(expr.value) == container
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _TAKING:
        return dotted_name(expr.func.value) == container
    return False


class _Finder(cst.CSTVisitor):
    def __init__(self, container: str) -> None:
        self.container = container
        self.items: set[str] = set()
        """Names bound to an item of the container somewhere in the method."""
        self.returns: list[cst.Return] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function's returns are not the method's

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        if _is_item(node.value, self.container):
            self.items.update(name for target in node.targets if (name := dotted_name(target.target)))

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)
