"""Which code is stream code: the one recognizer of every spelling of the stream API.

Two questions, asked by different callers of one answer:
- `stream_code_lines`: the lines of every function or module-level statement that creates or
  enters a stream, records, waits on or queries an event, makes a non-blocking copy, pins
  memory, calls `record_stream` or captures a CUDA graph. `--confirm` runs the tests that
  execute these lines.
- `entered_streams`: the streams a `with` item makes current, however the context is spelled:
  `torch.cuda.stream(s)` and its other names (lint/names.py answers those), a stream itself
  (`with s:`), a choice (`nullcontext() if c else torch.cuda.stream(s)`), a
  `functools.partial` of a stream context, or a function of the module that returns one or is a
  `@contextmanager` yielding inside one (`self._stream_context(s)`, `with on_stream(s):`).
  The linter's interpreters (streamflow, hostflow) and `stream_code_lines` all ask it.

Names only: nothing here follows values, so a context or stream bound to a variable is the
interpreter's to know (it passes `is_stream`). Pure: source text in, lines out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.tokens import choice, item_key
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.names import (
    STREAM_CONTEXTS,
    STREAM_VALUES,
    ImportTable,
    dotted_name,
)
from csan_lint.lint.nodes import children, parameters, parse_module
from csan_lint.lint.positions import positions

_STREAM_API = frozenset(entry.name for entry in api.FUNCTIONS if entry.marks_stream_code)
"""Names whose mere mention (called, or passed on as `partial(torch.cuda.stream, s)`) is stream code."""
_STREAM_METHODS = frozenset(m.name for m in api.METHODS if m.marks_stream_code and not m.shared)
"""Methods no other common object has: their receiver needs no checking."""
_EVENT_METHODS = frozenset(m.name for m in api.METHODS if m.marks_stream_code and m.shared)
"""Event (and stream) methods whose names other objects share: counted on a receiver named so."""


PARTIAL = "functools.partial"
_EXIT_STACKS = frozenset({"contextlib.ExitStack", "contextlib.AsyncExitStack"})
_CONTEXT_MANAGERS = frozenset({"contextlib.contextmanager", "contextlib.asynccontextmanager"})


@dataclass(frozen=True)
class _Wrapper:
    """A function of the module that enters a stream context for its caller: the streams it
    enters, as its own expressions (a parameter is replaced by the caller's argument)."""

    params: tuple[str, ...]
    streams: tuple[cst.BaseExpression, ...]


class ContextFunctions:
    """The module's functions that hand their caller a stream context, by bare name: a method is
    called as `self.m(...)` and defined as `m`, so the class is not part of the key. A name
    defined twice with different meanings is dropped, as imports are. Each name's functions are
    read when a call of that name is first asked about: most are never asked."""

    def __init__(self, functions: Iterable[cst.FunctionDef], imports: ImportTable) -> None:
        self._imports = imports
        self._functions: dict[str, list[cst.FunctionDef]] = {}
        for function in functions:
            self._functions.setdefault(function.name.value, []).append(function)
        self._wrappers: dict[str, _Wrapper | None] = {}

    def _wrapper(self, name: str) -> _Wrapper | None:
        if name not in self._wrappers:
            found = {  # by meaning: two classes may define the same helper alike
                (wrapper.params, tuple(map(_code, wrapper.streams))): wrapper
                for function in self._functions.get(name, ())
                if (wrapper := _Wrapper(_param_names(function), _wrapped_streams(function, self._imports))).streams
            }
            self._wrappers[name] = found.popitem()[1] if len(found) == 1 else None
        return self._wrappers[name]

    def streams(self, call: cst.Call) -> tuple[cst.BaseExpression, ...] | None:
        """The streams a call of a wrapper enters, in the caller's expressions; None if the
        call is no wrapper's."""
        dotted = dotted_name(call.func)
        wrapper = self._wrapper(dotted.rpartition(".")[2]) if dotted is not None else None
        if wrapper is None:
            return None
        assert dotted is not None
        method = "." in dotted
        found = []
        for stream in wrapper.streams:
            param = _parameter(stream, wrapper.params)
            if param is not None:
                argument = _argument(call, wrapper.params, param, method)
                if argument is not None:
                    found.append(argument)
            elif _root(stream) not in ("self", "cls") or dotted.rpartition(".")[0] in ("self", "cls"):
                found.append(stream)
            elif isinstance(call.func, cst.Attribute):  # `self.x` of another object (`self.loader.m()`): its own
                found.append(_rebased(stream, call.func.value))
        return tuple(found)


NO_FUNCTIONS = ContextFunctions((), ImportTable())


def entered_streams(
    expr: cst.BaseExpression,
    imports: ImportTable,
    functions: ContextFunctions = NO_FUNCTIONS,
    is_stream: Callable[[str], bool] = lambda key: False,
) -> tuple[cst.BaseExpression, ...] | None:
    """The expressions of the streams a `with` item may make current, None if it enters none.
    A choice between a stream context and something else (`nullcontext()`) enters the stream
    when it enters anything; a choice between two streams gives both ("one of these").
    `is_stream`: whether a dotted name is bound to a stream where the item is."""
    if isinstance(expr, cst.IfExp):
        sides = [entered_streams(side, imports, functions, is_stream) for side in (expr.body, expr.orelse)]
        if all(side is None for side in sides):
            return None
        return tuple(stream for side in sides if side is not None for stream in side)
    if isinstance(expr, cst.Call):
        qualified = imports.qualified(expr.func)
        if qualified in STREAM_CONTEXTS:
            return _stream_argument(expr.args)
        if qualified in STREAM_VALUES:
            return (expr,)
        if qualified == PARTIAL and expr.args and imports.qualified(expr.args[0].value) in STREAM_CONTEXTS:
            return _stream_argument(expr.args[1:])
        return functions.streams(expr)
    if isinstance(expr, cst.Subscript):  # `with streams[i % n]:`, an item of a collection of streams
        key = dotted_name(expr.value)
        known = key is not None and (is_stream(item_key(key)) or imports.binds_streams(key))
        return (expr,) if known else None
    key = dotted_name(expr)
    if key is not None and (is_stream(key) or imports.binds_stream(key) or imports.names_a_stream(key)):
        return (expr,)
    return None


def join_contexts(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, str]:
    """Context bindings where two paths meet: a context chosen by if/else enters its stream
    (the other path bound none, or one entering none: `suppress`), or one of two streams."""
    return {key: stream for key in a.keys() | b.keys() if (stream := choice((a.get(key), b.get(key))))}


def is_exit_stack(node: cst.With, imports: ImportTable) -> bool:
    """`with ExitStack() as stack:`: what `stack.enter_context` enters is left when it ends."""
    return any(
        isinstance(item.item, cst.Call) and imports.qualified(item.item.func) in _EXIT_STACKS for item in node.items
    )


def _stream_argument(args: Sequence[cst.Arg]) -> tuple[cst.BaseExpression, ...]:
    """The stream of `torch.cuda.stream(s)` / `StreamContext(stream=s)` (none given: none)."""
    stream = next((arg.value for arg in args if arg.keyword is None or arg.keyword.value == api.STREAM_KEYWORD), None)
    return () if stream is None else (stream,)


def _wrapped_streams(function: cst.FunctionDef, imports: ImportTable) -> tuple[cst.BaseExpression, ...]:
    """The streams a function's caller gets entered: those of the stream contexts it returns,
    or, for a `@contextmanager`, those of the `with` blocks around its `yield` statements."""
    manager = any(imports.qualified(_decorator_name(d)) in _CONTEXT_MANAGERS for d in function.decorators)
    found: list[cst.BaseExpression] = []
    for statement, within in _statements(function.body, (), imports):
        if isinstance(statement, cst.Return) and statement.value is not None:
            found.extend(entered_streams(statement.value, imports) or ())
        elif manager and isinstance(getattr(statement, "value", None), cst.Yield):
            found.extend(within)
    return tuple(found)


def _statements(
    suite: cst.BaseSuite, within: tuple[cst.BaseExpression, ...], imports: ImportTable
) -> Iterator[tuple[cst.BaseSmallStatement, tuple[cst.BaseExpression, ...]]]:
    """The simple statements of a function body, outside nested definitions, with the streams
    of the `with` blocks around each (as far as names alone tell). Statements only: walking
    every expression of every function a call may name would cost a good part of a parse."""
    body = suite.body if isinstance(suite, cst.IndentedBlock) else [suite]
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            for small in statement.body:
                yield small, within
        elif isinstance(statement, cst.BaseSmallStatement):
            yield statement, within
        elif isinstance(statement, cst.BaseCompoundStatement) and not isinstance(
            statement, cst.FunctionDef | cst.ClassDef
        ):
            inner = within
            if isinstance(statement, cst.With):
                for item in statement.items:
                    inner = (*inner, *(entered_streams(item.item, imports) or ()))
            for part in _suites(statement):
                yield from _statements(part, inner, imports)


def _suites(statement: cst.BaseCompoundStatement) -> Iterator[cst.BaseSuite]:
    """The bodies of a compound statement: its own, `else`/`elif`, handlers, `finally`, cases."""
    if not isinstance(statement, cst.Match):
        yield statement.body
    for part in ("orelse", "finalbody"):
        child = getattr(statement, part, None)
        if isinstance(child, cst.If):
            yield from _suites(child)
        elif child is not None:
            yield child.body
    for nested in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
        yield nested.body


def _decorator_name(decorator: cst.Decorator) -> cst.BaseExpression:
    expr = decorator.decorator
    return expr.func if isinstance(expr, cst.Call) else expr


def _param_names(function: cst.FunctionDef) -> tuple[str, ...]:
    return tuple(param.name.value for param in parameters(function))


def _parameter(stream: cst.BaseExpression, params: tuple[str, ...]) -> str | None:
    """The parameter a wrapper's stream is: `stream`, or a conversion of it (`as_cuda(stream)`)."""
    if isinstance(stream, cst.Call) and len(stream.args) == 1:
        stream = stream.args[0].value
    return stream.value if isinstance(stream, cst.Name) and stream.value in params else None


def _argument(call: cst.Call, params: tuple[str, ...], name: str, method: bool) -> cst.BaseExpression | None:
    """The caller's expression for parameter `name` (`self` is bound by a method call)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    offset = 1 if method and params[:1] in (("self",), ("cls",)) else 0
    index = params.index(name) - offset
    return positional[index] if 0 <= index < len(positional) else None


def _rebased(expr: cst.BaseExpression, receiver: cst.BaseExpression) -> cst.BaseExpression:
    """`self.x` (an attribute chain from `self`) of the object `receiver`: `receiver.x`."""
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        return expr.with_changes(value=_rebased(expr.value, receiver))
    return receiver


def _code(expr: cst.BaseExpression) -> str:
    return dotted_name(expr) or cst.Module(body=[]).code_for_node(expr)


def _root(expr: cst.BaseExpression) -> str | None:
    dotted = dotted_name(expr)
    return dotted.partition(".")[0] if dotted is not None else None


def stream_code_lines(source: str, *, spellings: Spellings = NO_SPELLINGS) -> frozenset[int]:
    """1-based lines of every function (the whole def, decorators included) and module-level or
    class-level statement that is stream code; empty for a file that does not parse.
    `spellings`: the project's own wrappers of the stream API (`[tool.csan-lint]`)."""
    try:
        module = parse_module(source)
    except cst.ParserSyntaxError:
        return frozenset()
    return stream_code_lines_in(module, spellings=spellings)


def stream_code_lines_in(module: cst.Module, *, spellings: Spellings = NO_SPELLINGS) -> frozenset[int]:
    """`stream_code_lines` of a module already parsed (the static pass's own tree)."""
    finder = _finder(module, spellings, first_only=False)
    if not finder.found:
        return frozenset()
    where = positions(module)
    lines: set[int] = set()
    for node in finder.found:
        start = min(where[part].start.line for part in (node, *getattr(node, "decorators", ())))
        lines.update(range(start, where[node].end.line + 1))
    return frozenset(lines)


def holds_stream_code(module: cst.Module, *, spellings: Spellings = NO_SPELLINGS) -> bool:
    """Whether `stream_code_lines_in` would find any line, answered at the first stream code
    statement and without the positions of nodes (half the recognizer's cost): `--confirm`
    knows which files to watch from it before their analysis is done."""
    return bool(_finder(module, spellings, first_only=True).found)


def _finder(module: cst.Module, spellings: Spellings, *, first_only: bool) -> _Finder:
    """The module's stream code statements found: all of them, or the first."""
    imports = ImportTable(spellings)
    functions: list[cst.FunctionDef] = []
    _collect(module, imports, functions)
    finder = _Finder(imports, ContextFunctions(functions, imports), first_only)
    finder.statements(module.body)
    return finder


def _collect(node: cst.CSTNode, imports: ImportTable, functions: list[cst.FunctionDef]) -> None:
    """Imports, accelerator bindings and function definitions anywhere in the module."""
    for child in children(node):
        # libcst's node classes are final: `type(...) is` spares isinstance's ABC machinery
        if type(child) is cst.Import or type(child) is cst.ImportFrom or type(child) is cst.Assign:
            imports.add(child)
        elif type(child) is cst.FunctionDef:
            functions.append(child)
        if not _is_expression(type(child)):
            _collect(child, imports, functions)


def _is_expression(kind: type) -> bool:
    known = _EXPRESSIONS.get(kind)
    if known is None:
        known = _EXPRESSIONS[kind] = issubclass(kind, cst.BaseExpression)
    return known


_EXPRESSIONS: dict[type, bool] = {}


class _Finder:
    """Collects the definitions and statements that are stream code, each judged by its own
    nodes: a nested definition is judged apart from the one around it."""

    def __init__(self, imports: ImportTable, functions: ContextFunctions, first_only: bool = False) -> None:
        self.imports = imports
        self.functions = functions
        self.first_only = first_only
        """Stop at the first statement found: whether there is any is all that is asked."""
        self.found: list[cst.CSTNode] = []
        self._api_names: dict[str, bool] = {}
        """Dotted name -> whether it names the stream API: most names recur, and their
        qualification depends on the name alone."""

    def statements(self, body: Sequence[cst.CSTNode]) -> None:
        for statement in body:
            if self.first_only and self.found:
                return
            if isinstance(statement, cst.ClassDef):
                self.statements(_body(statement))
            else:
                self.definition(statement)

    def definition(self, node: cst.CSTNode) -> None:
        nested: list[cst.CSTNode] = []
        if self._has_stream_code(node, nested):
            self.found.append(node)
        for inner in nested:
            if self.first_only and self.found:
                return
            if isinstance(inner, cst.ClassDef):
                self.statements(_body(inner))
            else:
                self.definition(inner)

    def _has_stream_code(self, root: cst.CSTNode, nested: list[cst.CSTNode]) -> bool:
        found = False
        stack = list(children(root))
        while stack:
            node = stack.pop()
            kind = type(node)  # final classes: see `_collect`
            if kind is cst.FunctionDef or kind is cst.ClassDef:
                nested.append(node)
                continue
            if kind is cst.Import or kind is cst.ImportFrom:
                continue  # naming the API is not using it
            if not found and kind in _CANDIDATES:
                found = self._is_stream_code(node)
                if found and self.first_only:
                    return True
            stack.extend(children(node))
        return found

    def _is_stream_code(self, node: cst.CSTNode) -> bool:
        if type(node) is cst.Name or type(node) is cst.Attribute:
            return self._names_api(node)
        if type(node) is cst.WithItem:
            return entered_streams(node.item, self.imports, self.functions) is not None
        if type(node) is cst.Arg:
            return node.keyword is not None and (_is_flag(node, api.NON_BLOCKING) or _is_flag(node, api.PIN_MEMORY))
        assert isinstance(node, cst.Call)
        if self.functions.streams(node) is not None:  # also `stack.enter_context(on_stream(s))`
            return True
        if not isinstance(node.func, cst.Attribute):
            return False
        method = node.func.attr.value
        if method in _STREAM_METHODS:
            return True
        receiver = dotted_name(node.func.value)
        return method in _EVENT_METHODS and receiver is not None and self.imports.names_an_event_or_stream(receiver)

    def _names_api(self, node: cst.Name | cst.Attribute) -> bool:
        dotted = dotted_name(node)
        if dotted is None:  # `get_accelerator().stream`: asked by its shape
            return self.imports.qualified(node) in _STREAM_API
        known = self._api_names.get(dotted)
        if known is None:
            known = self._api_names[dotted] = self.imports.qualified(node) in _STREAM_API
        return known


_CANDIDATES = frozenset({cst.Name, cst.Attribute, cst.WithItem, cst.Arg, cst.Call})
"""The node types `_Finder._is_stream_code` can say yes to."""


def _is_flag(arg: cst.Arg, keyword: str) -> bool:
    """`keyword=` given anything but a literal False."""
    assert arg.keyword is not None
    return arg.keyword.value == keyword and not (isinstance(arg.value, cst.Name) and arg.value.value == "False")


def _body(node: cst.ClassDef) -> Sequence[cst.CSTNode]:
    body = node.body
    return body.body if isinstance(body, cst.IndentedBlock) else [body]
