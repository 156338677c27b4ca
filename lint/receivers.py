"""Receivers of a known class: the object a call like `self.loader.stage(x)` or `loader.stage(x)`
is made on, when it is an instance of a class of the same module, so that the call runs that
class's method (its summary, lint/effects.py) with the receiver standing for its `self`.

An object's class is known from its bindings, read from the text: an attribute of `self` every
assignment of which (in the methods of the class and of its bases in the module) is
`Cls(...)`, a parameter annotated `Cls`, or `None`, or which is annotated `Cls`; a local
or parameter of the calling function bound the same way; an item of a container whose every
item is one (`[Cls(...) for ...]`, `.append(Cls(...))`, annotated `list[Cls]`), taken by
subscript or by a `for` loop over it. Any other binding makes it unknown: a call on it is not
followed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import children, parameters, target_names, target_parts

_UNKNOWN = ""
"""A name bound to something other than one class of the module."""
_ITEMS = "[]"
"""Suffix of a container's key for the class of its items (`self.groups[]`)."""
_CONTAINERS = ("list", "List", "Sequence", "Iterable", "Iterator", "deque", "Deque", "set", "Set", "tuple", "Tuple")
"""Annotations `X[Cls]` (`tuple[Cls, ...]` too) of a container whose items are `Cls`."""
_ADDING = ("append", "appendleft", "add", "insert")
"""Container methods that add their last argument as an item."""


class Receivers:
    """The module's classes an object a method is called on may be an instance of."""

    def __init__(
        self,
        functions: Mapping[str, cst.FunctionDef],
        classes: Mapping[str, Sequence[str]],
        makers: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.functions = functions
        self.classes = classes
        self.makers = classes if makers is None else makers
        """The names whose calls (or annotations) give an object its class: the module's
        classes, or the classes it imports (their methods are other linted modules')."""
        self.method_names = {name.rpartition(".")[2] for name in functions if name.rpartition(".")[0] in classes}
        """Every method name of the module's classes: a call of another name needs no lookup."""
        self._attributes: dict[str, dict[str, str]] = {}
        self._locals: dict[str, dict[str, str]] = {}

    def class_of(self, caller: str | None, receiver: cst.BaseExpression) -> str | None:
        """The class of the module `receiver` is an instance of where `caller` runs: a name of
        the function, or `self.x` in a method; None when unknown."""
        if caller is None or caller not in self.functions:
            return None
        owner = caller.rpartition(".")[0]
        attributes = self._attributes_of(owner) if owner in self.classes else {}
        suffix = ""
        if isinstance(receiver, cst.Subscript):  # `self.groups[i]`: an item
            receiver, suffix = receiver.value, _ITEMS
        key = dotted_name(receiver)
        if isinstance(receiver, cst.Name) and receiver.value not in ("self", "cls"):
            if caller not in self._locals:
                function = self.functions[caller]
                self._locals[caller] = _bound_classes([function], self.makers, attributes=False, outer=attributes)
            return self._locals[caller].get(f"{key}{suffix}") or None
        if key is not None and key.startswith("self.") and key.count(".") == 1:
            return attributes.get(f"{key}{suffix}") or None
        return None

    def calls(self, function: cst.FunctionDef) -> Iterator[cst.Call]:
        """The calls in `function` of a method name of the module's classes on an object other
        than `self` (`x.m(...)`, `self.x.m(...)`): the ones `class_of` may follow."""
        stack: list[cst.CSTNode] = [function.body]
        while stack:
            node = stack.pop()
            if type(node) is cst.Call:
                func = node.func
                if isinstance(func, cst.Attribute) and func.attr.value in self.method_names:
                    if not (isinstance(func.value, cst.Name) and func.value.value in ("self", "cls")):
                        yield node
            stack.extend(children(node))

    def _attributes_of(self, owner: str) -> dict[str, str]:
        """`self.x` -> its class, from the methods of `owner` and of its bases in the module."""
        if owner not in self._attributes:
            lineage, stack = [], [owner]
            while stack:
                cls = stack.pop()
                if cls in self.classes and cls not in lineage:
                    lineage.append(cls)
                    stack.extend(self.classes[cls])
            methods = [f for name, f in self.functions.items() if name.rpartition(".")[0] in lineage]
            self._attributes[owner] = _bound_classes(methods, self.makers, attributes=True)
        return self._attributes[owner]


def _bound_classes(
    functions: Sequence[cst.FunctionDef],
    classes: Mapping[str, Sequence[str]],
    *,
    attributes: bool,
    outer: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Name -> the one class every binding of it in `functions` gives (`_UNKNOWN` if they do
    not agree), and `name[]` -> the class of its items: `self.x` when `attributes`, else the
    functions' own names and parameters, a loop over `self.x` taking its items from `outer`."""
    found: dict[str, str] = {}
    loops: list[tuple[str, str]] = []

    def bind(name: str, cls: str | None) -> None:
        if cls is not None:
            found[name] = cls if found.get(name, cls) == cls else _UNKNOWN

    for function in functions:
        annotated = {}
        for param in parameters(function):
            annotated[param.name.value] = _annotated(param.annotation, classes)
            if not attributes:  # an unannotated parameter may be anything
                bind(param.name.value, annotated[param.name.value] or _UNKNOWN)
                bind(f"{param.name.value}{_ITEMS}", _annotated(param.annotation, classes, items=True) or _UNKNOWN)
        visitor = _Bindings(classes, annotated, attributes)
        visitor.walk(function.body.body)
        for name, cls in visitor.bindings:
            bind(name, cls)
        loops += visitor.loops
    for name, container in loops:  # after every binding of the container is known
        bind(name, found.get(f"{container}{_ITEMS}") or (outer or {}).get(f"{container}{_ITEMS}") or _UNKNOWN)
    return found


def _annotated(
    annotation: cst.Annotation | None, classes: Mapping[str, Sequence[str]], *, items: bool = False
) -> str | None:
    """The class of the module an annotation names: `Cls`, `"Cls"`, `Optional[Cls]`, `Cls | None`;
    with `items`, the class of the items of a container it names (`list[Cls]`)."""
    return None if annotation is None else _named_class(annotation.annotation, classes, items)


def _named_class(expr: cst.BaseExpression, classes: Mapping[str, Sequence[str]], items: bool) -> str | None:
    if isinstance(expr, cst.SimpleString):  # a forward reference: `"Cls"`, `"Cls | None"`
        text = expr.evaluated_value
        try:
            return _named_class(cst.parse_expression(text), classes, items) if isinstance(text, str) else None
        except cst.ParserSyntaxError:
            return None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
        sides = [side for side in (expr.left, expr.right) if not (isinstance(side, cst.Name) and side.value == "None")]
        return _named_class(sides[0], classes, items) if len(sides) == 1 else None
    if isinstance(expr, cst.Subscript):
        generic = (dotted_name(expr.value) or "").rpartition(".")[2]
        first = expr.slice[0].slice
        if not isinstance(first, cst.Index):
            return None
        if generic == "Optional" and len(expr.slice) == 1:
            return _named_class(first.value, classes, items)
        if items and generic in _CONTAINERS:
            return _named_class(first.value, classes, False)
        return None
    name = dotted_name(expr)
    return name if name in classes and not items else None


class _Bindings:
    """(name, class or `_UNKNOWN`; None for a binding to `None`) for each binding of a function."""

    def __init__(
        self, classes: Mapping[str, Sequence[str]], params: Mapping[str, str | None], attributes: bool
    ) -> None:
        self.classes = classes
        self.params = params
        self.attributes = attributes
        self.bindings: list[tuple[str, str | None]] = []
        self.loops: list[tuple[str, str]] = []
        """(name, container) for each `for name in container:` (also over a slice of it)."""

    def walk(self, statements: Sequence[cst.CSTNode]) -> None:
        """Every binding made by `statements` and the statements nested in them, not by nested
        functions and classes (their own names); expressions are not entered (a plain walk of
        statements: a libcst visitor rebuilds every node it passes, several times the cost)."""
        for node in statements:
            if isinstance(node, cst.SimpleStatementLine):
                self.walk(node.body)
            elif isinstance(node, cst.Assign):
                self._assign(node)
            elif isinstance(node, cst.AnnAssign):
                self._annotated_assign(node)
            elif isinstance(node, cst.AugAssign):
                self._augmented(node)
            elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
                self._adding(node.value)  # `self.groups.append(Group())`
            elif isinstance(node, cst.BaseCompoundStatement) and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                if isinstance(node, cst.For):
                    self._loop(node)
                elif isinstance(node, cst.With):
                    for item in node.items:
                        self._with_item(item)
                for part in (getattr(node, name, None) for name in ("body", "orelse", "finalbody")):
                    if isinstance(part, cst.If):  # `elif`
                        self.walk([part])
                    elif part is not None:
                        self.walk((part if isinstance(part, cst.BaseSuite) else part.body).body)
                for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                    self.walk(part.body.body)

    def _assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def _annotated_assign(self, node: cst.AnnAssign) -> None:
        cls = _annotated(node.annotation, self.classes)
        items = _annotated(node.annotation, self.classes, items=True)
        if cls is not None or items is not None:
            self._add(node.target, cls)
            self._add(node.target, items, items=True)
        elif node.value is not None:
            self._bind(node.target, node.value)

    def _loop(self, node: cst.For) -> None:
        container = node.iter.value if isinstance(node.iter, cst.Subscript) else node.iter
        key = dotted_name(container)
        if isinstance(node.target, cst.Name) and key is not None and not self.attributes:
            self.loops.append((node.target.value, key))
        else:
            self._add(node.target, _UNKNOWN)

    def _adding(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and node.args and func.attr.value in (*_ADDING, "extend"):
            value = node.args[-1].value
            cls = self._items_of_value(value) if func.attr.value == "extend" else self._class_of_value(value)
            self._add(func.value, cls, items=True)

    def _with_item(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._add(node.asname.name, _UNKNOWN)

    def _augmented(self, node: cst.AugAssign) -> None:
        self._add(node.target, _UNKNOWN)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            self._add(target, _UNKNOWN)
            self._add(target, _UNKNOWN, items=True)
        else:
            self._add(target, self._class_of_value(value))
            self._add(target, self._items_of_value(value), items=True)

    def _items_of_value(self, value: cst.BaseExpression) -> str | None:
        """The class of every item of a new container (None: empty, no item yet)."""
        if isinstance(value, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self._class_of_value(value.elt) or _UNKNOWN
        if isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            found = {self._class_of_value(element.value) for element in value.elements}
            return found.pop() if len(found) == 1 else None if not found else _UNKNOWN
        return _UNKNOWN

    def _class_of_value(self, value: cst.BaseExpression) -> str | None:
        if isinstance(value, cst.Name) and value.value == "None":
            return None
        if isinstance(value, cst.Call) and (name := dotted_name(value.func)) in self.classes:
            return name
        if isinstance(value, cst.Name) and self.params.get(value.value) is not None:
            return self.params[value.value]
        return _UNKNOWN

    def _add(self, target: cst.BaseExpression, cls: str | None, *, items: bool = False) -> None:
        """Binds the targets (with `items`: the items of the containers they name) to `cls`."""
        suffix = _ITEMS if items else ""
        if self.attributes:
            for element in target_parts(target):
                key = dotted_name(element)
                if key is not None and key.startswith("self.") and key.count(".") == 1:
                    self.bindings.append((f"{key}{suffix}", cls))
        elif items and isinstance(target, cst.Name):
            self.bindings.append((f"{target.value}{suffix}", cls))
        elif not items:
            self.bindings.extend((name, cls) for name in target_names(target))
