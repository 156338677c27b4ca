"""Hand-over through `self`: a method of the class that gives the items of a container kept on
`self` back to its caller (an offloader's `tensor_pop`), read from the methods' text.

A tensor one method allocates on a side stream and stores in `self.c[k]` is used and dropped
by whoever that method hands it to, on their own stream: the side stream's allocator may reuse
the block as soon as it is dropped (CSL201), unless the hand-over records the caller's stream.
So is one a function both returns and keeps in `self.c[k]` (a stash) that the class drops later
(`del self.c[k]`): the stash is no keep-alive for a caller that may hold the tensor, or a view of
it, past the drop, unless the class records an item of the stash (on any path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.scan import is_public, record_stream_calls, records_streams
from csan_lint.lint.views import viewed
from csan_lint.lint.vocabulary import VIEW_ATTRIBUTES, VIEW_METHODS

_TAKING = ("pop", "popleft", "get")
"""Container methods that give an item back (`self.c.pop(k)`, `self.c.get(k)`)."""
_DROPPING = ("pop", "popitem", "popleft", "clear", "remove")
"""Container methods that may drop an item (`self.c.pop(k)` with its result unused included)."""


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


def stash_dropped(
    function: str, name: str, container: str, functions: Mapping[str, cst.FunctionDef], classes: Mapping[str, object]
) -> cst.CSTNode | None:
    """Where the class of `function` drops an entry of `container` (`self.c`), which `function`
    fills with `name` and also returns (or a view of it): the first `del self.c[k]`,
    `self.c.pop(k)` or `self.c = {}` (out of `__init__`) in the class's functions, nested ones
    included (hooks closing over `self`). None if the function does not return `name`, if no
    entry is dropped, or if any of them records an item of the container (it may record the
    caller's stream, also on a branch)."""
    owner = _enclosing_class(function, classes)
    node = functions.get(function)
    if owner is None or node is None or not _returns(node, name):
        return None
    members = [(key, member) for key, member in functions.items() if key.startswith(f"{owner}.")]
    if any(_records_item(member, container) for _, member in members):
        return None
    for key, member in members:
        dropped = _Dropper(container, rebinds=key != f"{owner}.__init__")
        member.body.visit(dropped)
        if dropped.node is not None:
            return dropped.node
    return None


def _enclosing_class(function: str, classes: Mapping[str, object]) -> str | None:
    parts = function.split(".")
    return next((owner for end in range(len(parts) - 1, 0, -1) if (owner := ".".join(parts[:end])) in classes), None)


def _returns(function: cst.FunctionDef, name: str) -> bool:
    """Whether `function` returns `name` or a view of it (alone or in a tuple) at its own level."""
    finder = _Finder("")
    function.body.visit(finder)
    for node in finder.returns:
        value = node.value
        values = [element.value for element in value.elements] if isinstance(value, cst.Tuple) else [value]
        if any(
            item is not None and (base := viewed(item)) is not None and dotted_name(base) == name for item in values
        ):
            return True
    return False


def _records_item(function: cst.FunctionDef, container: str) -> bool:
    """Whether `function` records `self.c[k]`, or a name bound to an item of it, on some stream."""
    finder = _Finder(container)
    function.body.visit(finder)
    for call in record_stream_calls(function):
        recorded = _recorded(call)
        if recorded is not None and (_is_item(recorded, container) or _recorded_name(recorded) in finder.items):
            return True
    return False


def records(function: cst.FunctionDef, name: str) -> bool:
    """Whether `function` calls `name.record_stream(...)` (or `*record_stream(name, ...)`)
    anywhere: wherever it stands, it may record the caller's stream."""
    for call in record_stream_calls(function):
        recorded = _recorded(call)
        if recorded is not None and _recorded_name(recorded) == name:
            return True
    return False


def _recorded_name(recorded: cst.BaseExpression) -> str | None:
    """The name whose block a record of `recorded` records: `x` of `x`, `x[0]`, `x.view(-1)`."""
    return dotted_name(viewed(recorded) or recorded)


def _recorded(call: cst.Call) -> cst.BaseExpression | None:
    """The tensor of `t.record_stream(s)` or `record_stream(t, s)`; of `t.view(-1)`, `t.T`, `t`."""
    func = call.func
    recorded = func.value if isinstance(func, cst.Attribute) else call.args[0].value if call.args else None
    while True:
        if isinstance(recorded, cst.Call) and isinstance(recorded.func, cst.Attribute):
            if recorded.func.attr.value not in VIEW_METHODS:
                return recorded
            recorded = recorded.func.value
        elif isinstance(recorded, cst.Attribute) and recorded.attr.value in VIEW_ATTRIBUTES:
            recorded = recorded.value
        else:
            return recorded


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


class _Dropper(cst.CSTVisitor):
    """The first drop of an entry of `container` at the function's own level; with `rebinds`,
    rebinding the container drops them all."""

    def __init__(self, container: str, *, rebinds: bool) -> None:
        self.container = container
        self.rebinds = rebinds
        self.node: cst.CSTNode | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function is a member of its own

    def visit_Del(self, node: cst.Del) -> None:
        target = node.target
        if self.node is None and isinstance(target, cst.Subscript) and dotted_name(target.value) == self.container:
            self.node = node

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.node is None and self.rebinds and any(dotted_name(t.target) == self.container for t in node.targets):
            self.node = node

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            self.node is None
            and isinstance(func, cst.Attribute)
            and func.attr.value in _DROPPING
            and dotted_name(func.value) == self.container
        ):
            self.node = node
