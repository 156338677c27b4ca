"""Which operations of the stream API a module performs, and where: read once off its tree.

One walk over the module's code (layout, comments and strings are not code) resolves every
call through the module's imports (lint/names.py) and the table (api.py): the operations each
function's own code performs (nested definitions are their own), whether it builds a callable,
and how often each name is called. The analyses decide from this which functions to walk;
nothing they decide reads the text, so a comment or a string naming the API changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind, Operation
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import code_children, descendants
from csan_lint.lint.recognize import PARTIAL


def event_wait(call: cst.Call) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(waiting stream, event) of `s.wait_event(e)` and `e.wait(s)`; None for any other call
    (`work.wait()`, `cond.wait(timeout=5)`: an event's `wait` takes the stream, positionally)."""
    func = call.func
    if type(func) is not cst.Attribute or len(call.args) != 1:
        return None
    op, by_stream = api.method_op(func.attr.value)
    if op != api.WAIT_EVENT:
        return None
    if by_stream:
        return func.value, call.args[0].value
    return (call.args[0].value, func.value) if call.args[0].keyword is None else None


@dataclass(frozen=True)
class ModuleUses:
    """What a module's code does with the stream API, resolved (not spelled)."""

    ops: frozenset[Operation]
    """Every operation performed anywhere in the module."""
    own: Mapping[str, frozenset[Operation]]
    """Function (dotted as lint/scan.py names them; "" for the module's own code) -> the
    operations its own code performs, its lambdas' included, its nested definitions' not."""
    builders: frozenset[str]
    """Functions whose own code builds a callable: a lambda, a nested `def`, a `partial(...)`."""
    non_blocking: bool
    """A call passes `non_blocking=` something other than `False`."""
    pins: bool
    """A call pins host memory: `.pin_memory()`, `pin_memory=True`."""
    calls: Counter[tuple[str, str]]
    """("", f) -> the calls `f(...)`; ("self", m) / ("cls", m) -> the calls `self.m(...)` / `cls.m(...)`."""
    leaves: Counter[str]
    """The last name of every callee (`f`, `obj.f`, `self.f`) -> its calls."""
    registrations: tuple[tuple[str, cst.Call], ...] = ()
    """(function, call) of every hook registered (`p.register_hook(fn)`): lint/hooks.py."""
    waiting: frozenset[str] = frozenset()
    """Streams by dotted name that some code of the module may make wait: the waiter of a
    `wait_stream`/`wait_event` (the stream a `with` block enters, for `current_stream()` there),
    or a stream handed to a call that is not the stream API (a helper may make it wait)."""

    def performs(self, *kinds: Kind) -> bool:
        return any(op.kind in kinds for op in self.ops)

    def functions(self, *wanted: Operation | Kind, nested: bool = False) -> frozenset[str]:
        """The functions whose own code performs one of `wanted` (an operation, or any of a kind);
        with `nested`, also those with a definition nested in them that does."""
        found = {
            name for name, done in self.own.items() if name and any(op in wanted or op.kind in wanted for op in done)
        }
        if nested:
            found |= {name for name in self.own if name and any(inner.startswith(f"{name}.") for inner in found)}
        return frozenset(found)


NO_USES = ModuleUses(frozenset(), {}, frozenset(), False, False, Counter(), Counter())
"""A module without torch: no use of the stream API can be named."""

_NO_CALLS = frozenset({cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Import, cst.ImportFrom})
"""Nodes with no call under them: not walked into."""


def module_uses(
    module: cst.Module, imports: ImportTable, functions: Iterable[tuple[str, cst.FunctionDef]]
) -> ModuleUses:
    """Reads `module` (its imports and functions as lint/scan.py found them) once: each body
    with its own owner, a nested definition's decorators and defaults with the code around it."""
    names = {id(node): name for name, node in functions}
    own: dict[str, set[Operation]] = {}
    builders: set[str] = set()
    reader = _Calls(imports)
    bodies: list[tuple[cst.CSTNode, str]] = [(module, "")]
    registrations: list[tuple[str, cst.Call]] = []
    while bodies:
        root, owner = bodies.pop()
        done: set[Operation] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is cst.Call:
                op, builds = reader.read(node)  # type: ignore[arg-type]
                if op is not None:
                    done.add(op)
                    if op.kind is Kind.REGISTER_HOOK:
                        registrations.append((owner, node))  # type: ignore[arg-type]
                if builds:
                    builders.add(owner)
            elif kind is cst.Attribute:
                if node.attr.value == api.STREAM_HANDLE:  # type: ignore[attr-defined]
                    done.add(api.LAUNCH_ON_HANDLE)
                stack.append(node.value)  # type: ignore[attr-defined]
                continue
            elif kind in _NO_CALLS:
                continue
            elif kind is cst.FunctionDef:
                builders.add(owner)
                function: cst.FunctionDef = node  # type: ignore[assignment]
                bodies.append((function.body, names.get(id(function), owner)))
                stack.extend(function.decorators)
                stack.append(function.params)
                continue
            elif kind is cst.Lambda:
                builders.add(owner)
            elif kind is cst.With:
                reader.entered(node)  # type: ignore[arg-type]
            elif kind is cst.For:
                reader.iterated(node)  # type: ignore[arg-type]
            stack.extend(code_children(node))
        if done:
            own.setdefault(owner, set()).update(done)
    return ModuleUses(
        ops=frozenset(op for done in own.values() for op in done),
        own={name: frozenset(done) for name, done in own.items()},
        builders=frozenset(builders - {""}),
        non_blocking=reader.non_blocking,
        pins=reader.pins,
        calls=reader.calls,
        leaves=reader.leaves,
        registrations=tuple(registrations),
        waiting=frozenset(reader.waiting),
    )


class _Calls:
    """What each call does: its operation, whether it builds a callable; and the module-wide
    tallies (calls by name, non-blocking copies, pinning)."""

    def __init__(self, imports: ImportTable) -> None:
        self.imports = imports
        self.non_blocking = False
        self.pins = False
        self.calls: Counter[tuple[str, str]] = Counter()
        self.leaves: Counter[str] = Counter()
        self.waiting: set[str] = set()

    def read(self, call: cst.Call) -> tuple[Operation | None, bool]:
        func = call.func
        qualified = self.imports.qualified(func)
        op = api.operation(qualified)
        if type(func) is cst.Name:
            leaf = func.value
            self.calls["", leaf] += 1
        elif type(func) is cst.Attribute:
            leaf = func.attr.value
            if type(func.value) is cst.Name and func.value.value in ("self", "cls"):
                self.calls[func.value.value, leaf] += 1
            if op is None:
                op = api.method_op(leaf)[0]
                if op == api.WAIT_EVENT and event_wait(call) is None:
                    op = None
        else:
            leaf = ""
        self.leaves[leaf] += 1
        if op is None and api.records_stream(leaf):
            op = api.RECORD_STREAM  # a helper named after it: `_no_dispatch_record_stream(t, s)`
        if op == api.PIN:
            self.pins = True
        self._note_waiting(call, op)
        for arg in call.args:
            keyword = arg.keyword
            if keyword is None:
                continue
            if keyword.value == api.NON_BLOCKING and not _is_name(arg.value, "False"):
                self.non_blocking = True
            elif keyword.value == api.PIN_MEMORY and _is_name(arg.value, "True"):
                self.pins = True
        return op, qualified == PARTIAL

    def _note_waiting(self, call: cst.Call, op: Operation | None) -> None:
        waiter = _waiter(call, op)
        if isinstance(waiter, cst.Subscript):
            waiter = waiter.value  # an item of a list of streams: the list, whichever item
        if waiter is not None and (name := dotted_name(waiter)) is not None:
            self.waiting.add(name)
        elif op is None:  # a helper may make a stream it is handed wait
            self.waiting.update(name for arg in call.args if (name := dotted_name(arg.value)) is not None)

    def entered(self, node: cst.With) -> None:
        """A `with` block whose body makes the current stream wait makes the stream it enters wait."""
        entered = [name for item in node.items if (name := self._entered(item.item)) is not None]
        if entered and any(
            isinstance(call, cst.Call) and self._waits_on_current(call) for call in descendants(node.body)
        ):
            self.waiting.update(entered)

    def iterated(self, loop: cst.For) -> None:
        """`for s in self.streams: s.wait_stream(x)` makes each item of the list wait; the loop's
        name is noted as any waiter is, and the list with it."""
        collection, target = dotted_name(loop.iter), loop.target
        if collection is None or not isinstance(target, cst.Name):
            return
        for call in descendants(loop.body):
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
                op = api.method_op(call.func.attr.value)[0]
                waiter = _waiter(call, op)
                if isinstance(waiter, cst.Name) and waiter.value == target.value:
                    self.waiting.add(collection)

    def _entered(self, expr: cst.BaseExpression) -> str | None:
        if isinstance(expr, cst.Call):
            op = api.operation(self.imports.qualified(expr.func))
            if op is None or op.kind is not Kind.ENTER_STREAM or not expr.args:
                return None
            expr = expr.args[0].value
        return dotted_name(expr)

    def _waits_on_current(self, call: cst.Call) -> bool:
        op = api.operation(self.imports.qualified(call.func))
        if op is None and isinstance(call.func, cst.Attribute):
            op = api.method_op(call.func.attr.value)[0]
        waiter = _waiter(call, op)
        if not isinstance(waiter, cst.Call):
            return False
        made = api.operation(self.imports.qualified(waiter.func))
        return made is not None and made.kind is Kind.CURRENT_STREAM


def _waiter(call: cst.Call, op: Operation | None) -> cst.BaseExpression | None:
    """The stream `s.wait_stream(x)`, `s.wait_event(e)` or `e.wait(s)` makes wait."""
    if op == api.WAIT_STREAM and isinstance(call.func, cst.Attribute):
        return call.func.value
    if op == api.WAIT_EVENT:
        waited = event_wait(call)
        return waited[0] if waited is not None else None
    return None


def _is_name(expr: cst.BaseExpression, name: str) -> bool:
    return type(expr) is cst.Name and expr.value == name
