"""libcst's `node.children`, read from the node's fields.

libcst computes `children` by running the node's `_visit_and_replace_children` with a
collecting visitor, which rebuilds (and validates) a copy of the node on every call; the
analysis asks for children about 150,000 times over PyTorch's stream-using files. The fields a
node's children come from, in the order its visit takes them (lexical order), are learnt once
per node type by recording that visit's `on_visit_attribute` calls; after that, children are a
few attribute reads. tests/lint/test_libcst_shortcuts.py holds the result to libcst's own for
every node of a corpus; where a libcst's visit cannot be read, its own `children` answers.

`parse_module` is libcst's, without each node checking itself as the parser builds it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import libcst as cst


class _FieldOrder(cst.CSTVisitor):
    """Records the fields a node's visit walks, in order, without going below them."""

    def __init__(self) -> None:
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


_ORDER: dict[type, tuple[str, ...] | None] = {}
"""Per node type, the fields its children come from in order; None where this libcst's visit
could not be read (then libcst's own `children` answers)."""
_UNLEARNT: tuple[str, ...] = ("<not learnt yet>",)
_IS_NODE: dict[type, bool] = {}


class _Remembered(threading.local):
    """Per thread (an editor's server may lint in several), inside `remembered_subtrees()`:
    id(root) -> its `descendants`. Keyed by id, not by the node (libcst's `__hash__` is a Python
    call); the list starts with the root and keeps it alive, so its id cannot pass to a later node."""

    subtrees: dict[int, Sequence[cst.CSTNode]] | None = None


_REMEMBERED = _Remembered()


@contextmanager
def remembered_subtrees() -> Iterator[None]:
    """`descendants` built once per root within (one file's analysis and rules): the trees are
    immutable. Forgotten at the end, so that the trees are freed with the file."""
    outer, _REMEMBERED.subtrees = _REMEMBERED.subtrees, {}
    try:
        yield
    finally:
        _REMEMBERED.subtrees = outer


def descendants(root: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """`root` and every node under it, in the order of a walk that pops the last node off a
    stack and pushes its children (the last child is seen first); not to be changed by the
    caller. Several scans walk each function body (whether it records a tensor, uses a name as
    a tensor, waits on the default stream...): within `remembered_subtrees()` the walk is done
    once per root, and the scans go down a list."""
    remembered = _REMEMBERED.subtrees
    known = remembered.get(id(root)) if remembered is not None else None
    if known is not None:
        return known
    found: list[cst.CSTNode] = []
    stack = [root]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(children(node))
    if remembered is not None:
        remembered[id(root)] = found
    return found


def children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """The immediate sub-nodes of `node`, as `node.children` gives them."""
    order = _ORDER.get(type(node), _UNLEARNT)
    if order is _UNLEARNT:
        order = _ORDER[type(node)] = _field_order(node)
    if order is None:
        return node.children
    found: list[cst.CSTNode] = []
    for name in order:
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            found.extend(item for item in value if _is_node(type(item)))
        elif _is_node(kind):
            found.append(value)
    return found


_LAYOUT_FIELDS = frozenset(
    {
        "asynchronous", "colon", "comma", "comment", "dot", "empty_lines", "equal", "first_colon",
        "footer", "header", "lbrace", "lbracket", "leading_lines", "leading_whitespace",
        "lines_after_decorators", "lpar", "newline", "operator", "posonly_ind", "rbrace",
        "rbracket", "relative", "rpar", "second_colon", "semicolon", "star", "trailing_comma",
        "trailing_whitespace", "annotation", "returns",
    }
)  # fmt: skip
"""Fields that hold layout (whitespace, punctuation, operators' tokens) or annotations: no code
that runs is under them (a default value or a decorator is: those fields are kept)."""
_CODE_ORDER: dict[type, tuple[str, ...] | None] = {}


def code_children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """`children` without the layout and the annotations: the sub-nodes that may hold code that
    runs. A walk for calls goes down about half as many nodes."""
    order = _CODE_ORDER.get(type(node), _UNLEARNT)
    if order is _UNLEARNT:
        fields = _ORDER.get(type(node), _UNLEARNT)
        if fields is _UNLEARNT:
            fields = _ORDER[type(node)] = _field_order(node)
        order = _CODE_ORDER[type(node)] = (
            None if fields is None else tuple(name for name in fields if not _is_layout(name))
        )
    if order is None:
        return node.children
    found: list[cst.CSTNode] = []
    for name in order:
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            found.extend(value)  # libcst's sequence fields hold nodes only
        elif _is_node(kind):
            found.append(value)
    return found


def _is_layout(field: str) -> bool:
    return field in _LAYOUT_FIELDS or field.startswith("whitespace")


def parameters(function: cst.FunctionDef) -> tuple[cst.Param, ...]:
    """Every named parameter, positional-only, ordinary and keyword-only (not `*args`, `**kw`)."""
    params = function.params
    return (*params.posonly_params, *params.params, *params.kwonly_params)


def target_names(target: cst.CSTNode) -> Iterator[str]:
    """The names an assignment or `for` target binds (`a, (b, *c)` -> a, b, c)."""
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from target_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from target_names(target.value)


def target_parts(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The targets an assignment target is made of (`self.a, (b.c, *d) = ...` -> self.a, b.c, d)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [part for element in target.elements for part in target_parts(element.value)]
    if isinstance(target, cst.StarredElement):
        return target_parts(target.value)
    return [target]


def literal_items(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The items of a literal tuple, list or set, or the keys and values of a literal dict (a
    starred item as what it unpacks); None for any other expression."""
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        return [element.value for element in expr.elements]
    if isinstance(expr, cst.Dict):
        items: list[cst.BaseExpression] = []
        for item in expr.elements:
            if isinstance(item, cst.DictElement):
                items.append(item.key)
            items.append(item.value)
        return items
    return None


def _field_order(node: cst.CSTNode) -> tuple[str, ...] | None:
    """The fields in the order libcst visits them, then any field the visit did not announce
    (none in libcst 1.x; kept so that no child can be missed). None if the visit cannot be read."""
    recorder = _FieldOrder()
    try:
        node._visit_and_replace_children(recorder)
    except Exception:  # a libcst whose private visit changed: its public `children` still works
        return None
    visited = list(dict.fromkeys(recorder.fields))
    rest = [field.name for field in dataclasses.fields(node) if field.name not in visited]
    return (*visited, *rest)


def _is_node(kind: type) -> bool:
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return known


_PARSING = threading.Lock()
"""Held while node checks are off: a second thread's parse cannot restore them too early."""


def parse_module(source: str) -> cst.Module:
    """`cst.parse_module(source)` with the check every node runs as it is made (`_validate`,
    from `CSTNode.__post_init__`) off, as libcst's own comment there suggests: the native parser
    only builds trees its grammar allows, and the checks are about a sixth of the parse. Nodes
    made after it (a fix's replacement nodes) are checked as usual."""
    with _PARSING:
        checked = cst.CSTNode.__post_init__
        cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
        try:
            return cst.parse_module(source)
        finally:
            cst.CSTNode.__post_init__ = checked  # type: ignore[method-assign]


def _unchecked(self: cst.CSTNode) -> None:
    return None


def names_outside_returns(node: cst.CSTNode) -> set[str]:
    """The names a statement uses, but those only returned (`return loss` hands `loss` back; it
    does not put anything into it). Of a compound statement, its header's: the interpreter
    visits each statement of its bodies on its own."""
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Return, cst.BaseSuite)):
            continue
        if isinstance(current, cst.Name):
            names.add(current.value)
        stack.extend(children(current))
    return names
