"""Siblings of a recorded tensor (CSL201): a function that records one tensor it reads from an
object on the current stream says the object's tensors were made on another stream.

`h.a.record_stream(torch.cuda.current_stream())` ("since it's created on the compute stream")
is only needed if `h.a` was allocated on another stream and handed over to this one through `h`.
Another tensor read from the same `h` in that function (`h.b`, `getattr(h, "b", None)`) and used
on the same stream is handed over the same way: with no `record_stream`, when `h` drops it the
stream that made it may reuse its block while the use here is still pending. Nothing else in the
function shows a second stream, so the interpreter (lint/accesses.py) cannot see this; the
record is the evidence.

For precision, only what the function's text settles is taken:
- the holder is a name or an attribute chain other than bare `self`/`cls` (an object's own
  attributes need not share a stream), and no tensor (a recorded `p.grad` or `p.data`: the
  siblings are the tensor's metadata); the recorded tensor is not bound in the function (memory
  made here is lint/bindings.py's self-record case); metadata (`h.dtype`) is no sibling;
- the record's stream is the current stream (`current_stream()`, or a name bound only to it),
  and the sibling is used where the same stream is current (the same innermost stream block);
  or it is a stream named by the text (`s`, `self.side`), and the sibling is used in a block
  that enters it (`with torch.cuda.stream(s):`);
- a sibling is used like a tensor: passed to a call (not a builtin, a constructor or a
  container's `append`), the receiver of a tensor method, an operand or a subscripted value;
  used as an object (`h.b.c`, `h.b.run()`), as a stream or an event (`wait_stream(h.b)`,
  `h.copy_stream`), it is not a tensor;
- a sibling that is recorded on any stream or in any way the text cannot tell apart (a loop
  over several, `getattr(h, name)`), assigned a value here (made here), or that escapes (returned,
  stored, put in a container or a literal) is left alone;
- a function that may order the stream that made them after the uses (a host sync, or a wait
  by another stream than the recorded one) reports nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.facts import Sibling
from csan_lint.lint.names import CURRENT_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import children, target_names, target_parts
from csan_lint.lint.recognize import NO_FUNCTIONS, ContextFunctions, entered_streams
from csan_lint.lint.scan import TENSOR_EVIDENCE
from csan_lint.lint.values import code_of
from csan_lint.lint.vocabulary import (
    HOST_ATTRIBUTES,
    HOST_METHODS,
    ORDERING_METHODS,
    PURE_BUILTINS,
    STORING_METHODS,
    STREAM_WAITS,
    VIEW_ATTRIBUTES,
)

_ANY = "*"
"""Attribute key of a record the text cannot name (`getattr(h, name)`): every sibling of `h`."""
_OWN = ("self", "cls")
_OF_TENSORS = VIEW_ATTRIBUTES | {"grad"}
"""Attributes of a tensor (`p.grad`, `p.data`): their holder is a tensor, not a state handed over."""
_ESCAPES = (
    cst.Return, cst.Yield, cst.Await, cst.Element, cst.DictElement, cst.StarredElement, cst.IfExp,
    cst.BooleanOperation,
)  # fmt: skip
"""Parents through which a value goes on somewhere this module does not follow."""

_STREAM_CALLS = ORDERING_METHODS | {"stream"}
"""Calls of the stream API by their last name: what they take is a stream or an event."""

Held = tuple[str, str]
"""(holder, attribute): `node.state` and `residual` for `node.state.residual`."""


def unrecorded_siblings(
    function: cst.FunctionDef, imports: ImportTable, contexts: ContextFunctions = NO_FUNCTIONS
) -> list[Sibling]:
    """The siblings of `function`'s recorded tensors that it uses unrecorded on the same stream."""
    text = FunctionText(imports, contexts)
    text.walk(function.body)
    evidence: dict[str, tuple[str, cst.Call, cst.BaseExpression]] = {}  # holder -> (attribute, record, stream)
    covered: set[Held] = set()
    for call, recorded, stream in text.records:
        held = text.held(recorded)
        if held is None:
            covered.update(text.chains(recorded))
            continue
        covered.add(held)
        holder, attribute = held
        if (
            stream is not None
            and holder.split(".")[0] not in _OWN
            and attribute not in _OF_TENSORS
            and f"{holder}.{attribute}" not in text.assigned
            and (text.is_current(stream) or dotted_name(stream) is not None)
        ):
            evidence.setdefault(holder, (attribute, call, stream))
    found = []
    for (holder, attribute), reads in text.reads.items():
        if holder not in evidence or (holder, attribute) in covered or (holder, _ANY) in covered:
            continue
        kept, record, stream = evidence[holder]
        if (
            attribute == kept
            or attribute in HOST_ATTRIBUTES
            or api.names_an_event_or_stream(attribute)  # it holds a stream or an event
            or f"{holder}.{attribute}" in text.assigned
        ):
            continue
        named = None if text.is_current(stream) else code_of(stream)  # None: the current stream
        if text.joins(named):
            continue
        use = text.first_use(reads, text.on_stream(record, named))
        if use is not None:
            tensor, statement = f"{holder}.{attribute}", text.statement[use]
            found.append(Sibling(tensor, use, statement, f"{holder}.{kept}", record, code_of(stream), named is None))
    return found


class FunctionText:
    """One walk over a function's body (not its nested definitions): bindings, reads of
    attributes, records, and for each node its parent, statement and innermost stream block."""

    def __init__(self, imports: ImportTable, contexts: ContextFunctions) -> None:
        self.imports, self.contexts = imports, contexts
        self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self.statement: dict[cst.CSTNode, cst.CSTNode] = {}
        self.position: dict[cst.CSTNode, int] = {}
        """Each node's place in the walk's (source) order."""
        self.block: dict[cst.CSTNode, cst.With | None] = {}
        self.binds: dict[str, list[cst.BaseExpression | None]] = {}
        """Local name -> the values bound to it (None: a binding the text cannot follow)."""
        self.loads: dict[str, list[cst.Name]] = {}
        self.assigned: set[str] = set()
        """Attribute chains assigned a value other than None (made in the function)."""
        self.stores: set[cst.CSTNode] = set()
        self.reads: dict[Held, list[cst.BaseExpression]] = {}
        self.records: list[tuple[cst.Call, cst.BaseExpression, cst.BaseExpression | None]] = []
        """(call, recorded tensor, stream) of each `record_stream` call."""
        self.waiters: list[cst.BaseExpression | None] = []
        """The stream of each `wait_stream`/`wait_event` call; None for a host sync."""

    def walk(self, body: cst.CSTNode) -> None:
        stack: list[tuple[cst.CSTNode, cst.CSTNode | None, cst.CSTNode | None, cst.With | None]] = [
            (body, None, None, None)
        ]
        while stack:
            node, parent, statement, block = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue  # runs where it is called; nested functions are analysed on their own
            if parent is not None:
                self.parent[node] = parent
            if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                statement = node
            self.statement[node] = statement or node
            self.position[node] = len(self.position)
            self.block[node] = block
            self._note(node)
            inner = node if isinstance(node, cst.With) and self._enters_stream(node) else block
            for child in reversed(children(node)):
                # a `with` item's expression is evaluated before the block is entered
                stack.append((child, node, statement, block if isinstance(child, cst.WithItem) else inner))

    def _enters_stream(self, node: cst.With) -> bool:
        return any(
            not isinstance(item.item, cst.Call) or entered_streams(item.item, self.imports, self.contexts) is not None
            for item in node.items
        )

    def _note(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Assign):
            for target in node.targets:
                self._bind(target.target, node.value if len(node.targets) == 1 else None)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            self._bind(node.target, node.value if isinstance(node, cst.AnnAssign) else None)
        elif isinstance(node, (cst.For, cst.CompFor)):
            self._bind(node.target, None)
        elif isinstance(node, cst.AsName):
            self._bind(node.name, None)
        elif isinstance(node, cst.Name) and node not in self.stores and not _member(node, self.parent.get(node)):
            self.loads.setdefault(node.value, []).append(node)
        elif isinstance(node, cst.Attribute) and node not in self.stores:
            holder = dotted_name(node.value)
            if holder is not None:
                self.reads.setdefault((holder, node.attr.value), []).append(node)
        elif isinstance(node, cst.Call):
            self._call(node)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        self.stores.add(target)
        if isinstance(target, cst.Name):
            self.binds.setdefault(target.value, []).append(value)
            return
        chain = dotted_name(target)
        if chain is not None and not (isinstance(value, cst.Name) and value.value == "None"):
            self.assigned.add(chain)
        for name in target_names(target):  # `a, b = ...`, `for x in ...`
            self.binds.setdefault(name, []).append(None)
        for element in target_parts(target):
            self.stores.add(element)

    def _call(self, node: cst.Call) -> None:
        func, args = node.func, node.args
        leaf = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if api.method_op(leaf)[0] == api.SYNC_RECEIVER:
            self.waiters.append(None)
        elif leaf in STREAM_WAITS and isinstance(func, cst.Attribute):
            self.waiters.append(func.value)
        elif api.records_stream(leaf):
            if isinstance(func, cst.Attribute):
                self.records.append((node, func.value, args[0].value if args else None))
            elif args:
                self.records.append((node, args[0].value, args[1].value if len(args) > 1 else None))
        held = _getattr(node)
        if held is not None:
            self.reads.setdefault(held, []).append(node)

    def held(self, expr: cst.BaseExpression) -> Held | None:
        """(holder, attribute) of `h.a`, `getattr(h, "a", ...)`, or a name bound only to one."""
        if isinstance(expr, cst.Attribute):
            holder = dotted_name(expr.value)
            return (holder, expr.attr.value) if holder is not None else None
        if isinstance(expr, cst.Call):
            return _getattr(expr)
        if isinstance(expr, cst.Name):
            values = self.binds.get(expr.value, [])
            found = {self.held(value) if value is not None else None for value in values}
            if len(found) == 1 and None not in found:
                return found.pop()
        return None

    def chains(self, expr: cst.BaseExpression) -> Iterator[Held]:
        """Every (holder, attribute) a record of `expr` may cover: the chains in it, and in what
        a name in it is bound to (`for t in (h.a, h.b): t.record_stream(s)`)."""
        stack: list[cst.CSTNode] = [expr]
        seen: set[str] = set()
        while stack:
            node = stack.pop()
            stack.extend(children(node))
            if isinstance(node, cst.Attribute) and (holder := dotted_name(node.value)) is not None:
                yield holder, node.attr.value
            elif isinstance(node, cst.Call) and (held := _getattr(node)) is not None:
                yield held
            elif isinstance(node, cst.Call) and _is_builtin(node.func, "getattr") and node.args:
                if (holder := dotted_name(node.args[0].value)) is not None:
                    yield holder, _ANY
            elif isinstance(node, cst.Name) and node.value not in seen:
                seen.add(node.value)
                stack.extend(value for value in self.binds.get(node.value, []) if value is not None)
                if None in self.binds.get(node.value, []):
                    stack.extend(self._loop_iterables(node.value))

    def _loop_iterables(self, name: str) -> Iterator[cst.CSTNode]:
        for node, parent in self.parent.items():
            if (
                isinstance(parent, (cst.For, cst.CompFor))
                and node is parent.iter
                and name in target_names(parent.target)
            ):
                yield node

    def is_current(self, stream: cst.BaseExpression | None) -> bool:
        """`current_stream()` in any spelling, or a name bound only to it in the function."""
        if isinstance(stream, cst.Call):
            return self.imports.qualified(stream.func) == CURRENT_STREAM
        if isinstance(stream, cst.Name):
            values = self.binds.get(stream.value, [])
            return bool(values) and all(self.is_current(value) for value in values)
        return False

    def joins(self, stream: str | None) -> bool:
        """Whether the function may order the stream that made the tensors after their uses:
        a host sync, or a stream other than the recorded one (`stream`; None: the current
        stream) made to wait (the allocator reuses a block only for later work there)."""
        for waiter in self.waiters:
            recorded = waiter is not None and (self.is_current(waiter) if stream is None else code_of(waiter) == stream)
            if not recorded:
                return True
        return False

    def on_stream(self, record: cst.Call, stream: str | None) -> Callable[[cst.CSTNode], bool]:
        """Whether the recorded stream is current at a node: in the record's own stream block
        for the current stream (`stream` None), else in a block that enters `stream`."""
        if stream is None:
            block = self.block.get(record)
            return lambda node: self.block.get(node) is block

        def entered(node: cst.CSTNode) -> bool:
            block = self.block.get(node)
            return block is not None and any(
                stream in map(code_of, entered_streams(item.item, self.imports, self.contexts) or ())
                for item in block.items
            )

        return entered

    def first_use(
        self, reads: list[cst.BaseExpression], on_stream: Callable[[cst.CSTNode], bool]
    ) -> cst.CSTNode | None:
        """The first place a read (or the name it is bound to) is used like a tensor where
        `on_stream`; None if there is none, or if the value escapes or is used as an object anywhere."""
        uses: list[cst.CSTNode] = []
        for read in reads:
            parent = self.parent.get(read)
            if isinstance(parent, cst.Assign) and parent.value is read:
                target = parent.targets[0].target if len(parent.targets) == 1 else None
                if not isinstance(target, cst.Name) or len(self.binds.get(target.value, [])) != 1:
                    return None  # stored elsewhere, or a name that also holds other values
                uses.extend(self.loads.get(target.value, []))
            else:
                uses.append(read)
        first: cst.CSTNode | None = None
        for use in uses:
            kind = self._use(use)
            if kind is None:
                return None
            if kind and on_stream(use):
                first = use if first is None else min(first, use, key=self.position.__getitem__)
        return first

    def _use(self, node: cst.CSTNode) -> bool | None:
        """True: used like a tensor; False: looked at only (`is None`, `if x:`, `.shape`);
        None: it escapes or is not a tensor."""
        parent = self.parent.get(node)
        if isinstance(parent, cst.BinaryOperation):
            return True
        if isinstance(parent, cst.UnaryOperation):
            return not isinstance(parent.operator, cst.Not)  # `not x` tests a flag
        if isinstance(parent, cst.Subscript):
            return parent.value is node
        if isinstance(parent, cst.Attribute):
            member = parent.attr.value
            call = self.parent.get(parent)
            if isinstance(call, cst.Call) and call.func is parent:  # a method
                if member in HOST_METHODS:
                    return False
                return True if member in TENSOR_EVIDENCE or member.endswith("_") else None
            return False if member in HOST_ATTRIBUTES or member in VIEW_ATTRIBUTES else None
        if isinstance(parent, cst.Call) and parent.func is node:
            return None  # a callable object
        if isinstance(parent, cst.Arg):
            call = self.parent.get(parent)
            assert isinstance(call, cst.Call)
            return passes_work(call)
        if isinstance(parent, _ESCAPES):
            return None
        if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            return None  # bound again or stored: followed no further
        return False


def passes_work(call: cst.Call) -> bool | None:
    """Whether passing a value to `call` hands it to code that may launch work on it: not a
    builtin that only looks, not a container's store or a constructor (the value escapes)."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if isinstance(func, cst.Name) and name in PURE_BUILTINS:
        return False
    if name in _STREAM_CALLS or api.records_stream(name):
        return False  # a stream or an event is no tensor
    if name in STORING_METHODS or name[:1].isupper():
        return None
    return True


def _getattr(call: cst.Call) -> Held | None:
    """(holder, attribute) of `getattr(h, "a")` or `getattr(h, "a", default)`."""
    if not _is_builtin(call.func, "getattr") or len(call.args) not in (2, 3):
        return None
    holder, name = dotted_name(call.args[0].value), call.args[1].value
    if holder is None or not isinstance(name, cst.SimpleString):
        return None
    attribute = name.evaluated_value
    return (holder, attribute) if isinstance(attribute, str) and attribute.isidentifier() else None


def _member(name: cst.Name, parent: cst.CSTNode | None) -> bool:
    """Whether `name` names a member or a keyword (`h.name`, `f(name=...)`), not a variable."""
    return (isinstance(parent, cst.Attribute) and parent.attr is name) or (
        isinstance(parent, cst.Arg) and parent.keyword is name
    )


def _is_builtin(func: cst.BaseExpression, name: str) -> bool:
    return isinstance(func, cst.Name) and func.value == name
