"""Deferred callables that capture the current stream (CSL104, stale-stream-capture).

`functools.partial(kernel, stream=torch.cuda.current_stream().cuda_stream)`, or a lambda or a
nested `def` that uses a stream its function bound to `current_stream()`: the stream is fixed
when the callable is built. When the callable runs later (it was stored, handed to other code or
returned), its kernels still launch on the stream of build time, while whoever runs it orders the
consumers of its results after the stream current at run time: those waits do not cover them.
A callable that calls `current_stream()` in its own body resolves the stream when it runs, and
captures nothing.

Quiet, because the capture cannot mislead its runner:
- a callable called where it is built and not kept (`gemm_fn(x)` on every path it is used);
- one handed to a `with` item (a context that uses it for the block), to a builtin that calls it
  at once (`map`, `sorted`, ...), or registered by a call whose handle the same function
  `remove()`s;
- one that uses the captured stream only to enter it (`with torch.cuda.stream(s):`: it says where
  its work runs) or to order streams (`s.wait_stream(...)`, `t.record_stream(s)`, `e.record(s)`);
- a `current_stream()` read inside a stream block: that is the block's stream, chosen explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.uses import ModuleUses
from csan_lint.lint.facts import StaleCapture
from csan_lint.lint.names import CURRENT_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import children, literal_items, target_names
from csan_lint.lint.recognize import PARTIAL, entered_streams
from csan_lint.lint.values import code_of
from csan_lint.lint.vocabulary import ORDERING_METHODS

_HANDLE = "cuda_stream"
"""The raw `cudaStream_t` of a stream, which kernels written outside torch are launched on."""
_REBINDING = (cst.AugAssign, cst.For, cst.NamedExpr, cst.AnnAssign, cst.AsName)
"""Nodes that bind names other than by `=` (`+=`, `for`, `:=`, `as`): such a name is not (only) a stream."""
_CALLS_AT_ONCE = frozenset({"map", "filter", "sorted", "min", "max", "reduce"})
"""Builtins (and `functools.reduce`) that call the callable they are given before returning."""


def stale_captures(
    uses: ModuleUses, imports: ImportTable, functions: Sequence[tuple[str, cst.FunctionDef]]
) -> tuple[StaleCapture, ...]:
    """Every callable of the module that captures the current stream and leaves its function.
    `imports` and `functions`: the module's, as lint/scan.py read them; only the functions whose
    own code asks for the current stream and builds a callable (`uses`) are walked."""
    readers = uses.functions(Kind.CURRENT_STREAM) & uses.builders
    return tuple(
        capture for name, function in functions if name in readers for capture in _Builder(function, imports).stale()
    )


class _Builder:
    """One function's own code (nested definitions aside): the names it binds to its current
    stream, the callables it builds with one, and where those go."""

    def __init__(self, node: cst.FunctionDef, imports: ImportTable) -> None:
        self.node = node
        self.imports = imports
        self.streams: set[str] = set()
        """Local names every binding of which is the function's current stream (or its handle)."""
        self.partials: list[tuple[cst.Call, bool]] = []
        """`partial(...)` calls, each with whether it is made inside a stream block."""
        self.functions: list[tuple[cst.FunctionDef | cst.Lambda, bool]] = []
        """Lambdas and nested definitions, the same way."""
        self.scoped: set[cst.CSTNode] = set()
        """`with` items: what they are handed is used for the block."""
        self.removed: set[str] = set()
        """Names `h` of the `h.remove()` calls: registration handles given back in the function."""
        self.reads_current = False
        """Whether the function asks for its current stream outside any stream block."""
        self._read()

    def stale(self) -> Iterator[StaleCapture]:
        if not self.reads_current:
            return
        for built, capture, kind in self._capturing():
            found = self._escape(built)
            if found is not None:
                holder, escape, how = found
                yield StaleCapture(f"'{holder}'" if holder else kind, capture, built, escape, how)

    def _read(self) -> None:
        """One walk of the function's own code: what it binds, builds, scopes and removes.
        (`type() is`, not `isinstance`: libcst's classes make the latter an ABC check per node.)"""
        bindings: list[tuple[str, cst.BaseExpression, bool]] = []
        rebound: set[str] = set()
        stack: list[tuple[cst.CSTNode, bool]] = [(child, False) for child in reversed(children(self.node.body))]
        while stack:
            node, in_block = stack.pop()
            kind = type(node)
            if kind is cst.Call:
                self._read_call(cast(cst.Call, node), in_block)
            elif kind is cst.FunctionDef or kind is cst.Lambda:
                self.functions.append((cast(cst.FunctionDef | cst.Lambda, node), in_block))
                if kind is cst.FunctionDef:
                    continue  # its own code is its own
            elif kind is cst.ClassDef:
                continue
            elif kind is cst.With:
                with_node = cast(cst.With, node)
                self.scoped.update(item.item for item in with_node.items)
                enters = any(entered_streams(item.item, self.imports) is not None for item in with_node.items)
                stack.append((with_node.body, in_block or enters))
                stack.extend((item, in_block) for item in reversed(with_node.items))
                continue
            elif kind is cst.Assign:
                assign = cast(cst.Assign, node)
                for target in assign.targets:
                    if type(target.target) is cst.Name:
                        bindings.append((target.target.value, assign.value, in_block))
                    else:
                        rebound.update(target_names(target.target))
            elif kind in _REBINDING:
                rebound.update(target_names(getattr(node, "name" if kind is cst.AsName else "target")))
            stack.extend((child, in_block) for child in reversed(children(node)))
        for name, value, in_block in bindings:  # in source order: `h = s.cuda_stream` after `s = ...`
            if name not in rebound and self._is_current(value, in_block):
                self.streams.add(name)
            else:
                rebound.add(name)
        self.streams -= rebound

    def _read_call(self, call: cst.Call, in_block: bool) -> None:
        qualified = self.imports.qualified(call.func)
        if qualified == CURRENT_STREAM and not in_block:
            self.reads_current = True
        elif qualified == PARTIAL:
            self.partials.append((call, in_block))
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "remove":
            handle = dotted_name(call.func.value)
            if handle is not None:
                self.removed.add(handle)

    def _is_current(self, expr: cst.BaseExpression, in_block: bool) -> bool:
        """The function's current stream, or its handle: `current_stream()` outside any stream
        block, `.cuda_stream` of one, or a name bound to one."""
        if isinstance(expr, cst.Attribute) and expr.attr.value == _HANDLE:
            return self._is_current(expr.value, in_block)
        if isinstance(expr, cst.Name):
            return expr.value in self.streams
        return isinstance(expr, cst.Call) and not in_block and self.imports.qualified(expr.func) == CURRENT_STREAM

    def _capturing(self) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression, str]]:
        """Each callable built here with the current stream in it: (callable, capture, kind)."""
        for call, in_block in self.partials:
            if len(call.args) > 1 and not self._orders(call.args[0].value):
                capture = next((arg.value for arg in call.args[1:] if self._is_current(arg.value, in_block)), None)
                if capture is not None:
                    yield call, capture, f"'partial({code_of(call.args[0].value)}, ...)'"
        for built, in_block in self.functions:
            params = built.params
            named = (*params.posonly_params, *params.params, *params.kwonly_params)
            default = next(
                (param.default for param in named if param.default and self._is_current(param.default, in_block)),
                None,
            )
            captured = default or self._launch_use(built, {param.name.value for param in named})
            if captured is not None:
                yield built, captured, "a lambda" if isinstance(built, cst.Lambda) else f"'{built.name.value}'"

    def _launch_use(self, built: cst.Lambda | cst.FunctionDef, params: set[str]) -> cst.BaseExpression | None:
        """A captured stream (or its handle) handed to a call that is neither a stream context nor
        an ordering: the work that call launches runs on it. Names the callable binds are its own."""
        free = self.streams - params
        if not free:
            return None
        own: set[str] = set()
        uses: list[tuple[str, cst.BaseExpression]] = []
        stack: list[cst.CSTNode] = [built.body]
        while stack:
            node = stack.pop()
            stack.extend(children(node))
            if isinstance(node, cst.Assign):
                own.update(name for target in node.targets for name in target_names(target.target))
            elif isinstance(node, cst.Call) and not self._orders(node.func):
                for arg in node.args:
                    value = arg.value
                    stream = value.value if isinstance(value, cst.Attribute) and value.attr.value == _HANDLE else value
                    if isinstance(stream, cst.Name) and stream.value in free:
                        uses.append((stream.value, value))
        return next((use for name, use in uses if name not in own), None)

    def _orders(self, func: cst.BaseExpression) -> bool:
        """A stream API call (`torch.cuda.stream(s)`) or an ordering method (`e.record(s)`)."""
        qualified = self.imports.qualified(func)
        if qualified is not None and qualified.startswith("torch.cuda."):
            return True
        leaf = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        return leaf in ORDERING_METHODS or api.records_stream(leaf)

    def _escape(self, built: cst.CSTNode) -> tuple[str | None, cst.CSTNode, str] | None:
        """Where the callable first leaves the function, in source order, with the first name it
        was bound to: (name, node, how). None where it is only called."""
        holders = [built.name.value] if isinstance(built, cst.FunctionDef) else []
        registered: dict[cst.CSTNode, str] = {}
        """Calls whose result is bound to a name: `h = t.register_hook(fn)`."""
        stack: list[cst.CSTNode] = list(reversed(children(self.node.body)))
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            stack.extend(reversed(children(node)))
            holder = holders[0] if holders else None
            if isinstance(node, cst.Assign):
                if _holds(node.value, built, holders):
                    for target in node.targets:
                        if not isinstance(target.target, cst.Name):
                            return holder, node, f"stored in '{code_of(target.target)}'"
                        holders.append(target.target.value)
                elif isinstance(node.value, cst.Call) and len(node.targets) == 1:
                    handle = dotted_name(node.targets[0].target)
                    if handle is not None:
                        registered[node.value] = handle
            elif isinstance(node, (cst.Return, cst.Yield)) and _holds(node.value, built, holders):
                return holder, node, "returned" if isinstance(node, cst.Return) else "yielded"
            elif isinstance(node, cst.Call) and node not in self.scoped:
                callee = code_of(node.func)
                kept = callee.rpartition(".")[2] not in _CALLS_AT_ONCE and registered.get(node) not in self.removed
                if kept and any(_holds(arg.value, built, holders) for arg in node.args):
                    return holder, node, f"passed to '{callee}'"
        return None


def _holds(expr: cst.BaseExpression | cst.From | None, built: cst.CSTNode, holders: list[str]) -> bool:
    """Whether `expr`'s value is the callable or holds it (a literal container, a choice)."""
    if expr is None or isinstance(expr, cst.From):  # `yield from` hands over another iterator's items
        return False
    if expr is built or (isinstance(expr, cst.Name) and expr.value in holders):
        return True
    if isinstance(expr, cst.IfExp):
        return _holds(expr.body, built, holders) or _holds(expr.orelse, built, holders)
    if isinstance(expr, cst.BooleanOperation):
        return _holds(expr.left, built, holders) or _holds(expr.right, built, holders)
    items: Sequence[cst.BaseExpression] | None = literal_items(expr)
    return items is not None and any(_holds(item, built, holders) for item in items)
