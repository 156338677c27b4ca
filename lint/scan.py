"""What the stream-flow analysis needs to know about a module before interpreting it: its
imports, functions, classes and globals, which functions have stream blocks, and who calls whom.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind, Receiver
from csan_lint.lint.analysis.tokens import CURRENT, UNKNOWN, alternatives, choice, root
from csan_lint.lint.annotations import tensor_annotation
from csan_lint.lint.containers import COMPREHENSIONS
from csan_lint.lint.devices import FACTORIES
from csan_lint.lint.names import CURRENT_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import children, descendants, parameters, target_names
from csan_lint.lint.recognize import NO_FUNCTIONS, ContextFunctions, entered_streams
from csan_lint.lint.summaries import module_name
from csan_lint.lint.values import code_of
from csan_lint.lint.vocabulary import (
    HOST_ATTRIBUTES,
    HOST_METHODS,
    HOST_TENSORS,
    HOST_TORCH,
    METADATA_BUILTINS,
    SHAPED_LIKE,
    SYNC_METHODS,
    TENSOR_METHODS,
    TENSOR_MODULES,
    VIEW_METHODS,
)


def body_of(node: cst.BaseSuite) -> Sequence[cst.BaseStatement | cst.BaseSmallStatement]:
    return node.body


def is_public(method: str) -> bool:
    return not method.startswith("_") or (method.startswith("__") and method.endswith("__") and method != "__new__")


def self_calls(node: cst.CSTNode) -> set[str]:
    """Names of the methods called as `self.m(...)` anywhere under `node`."""
    return {name.removeprefix("self.") for name in _callees(node) if name.startswith("self.")}


def _callees(node: cst.CSTNode) -> Iterator[str]:
    """`f` and `self.m` for each call `f(...)`, `self.m(...)` under `node`."""
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) is cst.Call:  # `type() is`, as in `dotted_name`: most nodes are no call
            func = current.func
            if isinstance(func, cst.Name):
                yield func.value
            elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                yield f"self.{func.attr.value}"
        stack.extend(children(current))


def records_streams(function: cst.FunctionDef) -> bool:
    """Whether `function` calls `record_stream` (`t.record_stream(s)`, `_no_dispatch_record_stream(t, s)`):
    with no stream block of its own it may still record a tensor on the stream that allocated it."""
    return any(True for _ in record_stream_calls(function))


def record_stream_calls(function: cst.FunctionDef) -> Iterator[cst.Call]:
    """Each call of `record_stream` in `function`, as a method or a helper of that name."""
    for current in descendants(function.body):
        if type(current) is cst.Call:
            func = current.func
            name = (
                func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            )
            if api.records_stream(name):
                yield current


TENSOR_EVIDENCE = (
    TENSOR_METHODS | VIEW_METHODS | SYNC_METHODS | {"numel", "element_size", "data_ptr", "untyped_storage"}
)


def _tensor_method(method: str) -> bool:
    """A method only tensors have: in-place (`div_`), a view, a copy to a dtype or the host.
    Objects of the project (`plan.run()`, `transformer.transform()`) have methods too."""
    return (method.endswith("_") and not method.startswith("_")) or method in TENSOR_EVIDENCE


_MOVES = frozenset(
    m.name
    for m in api.METHODS
    if m.receiver is Receiver.TENSOR and ((m.op.kind is Kind.COPY and not m.op.in_place) or m.op == api.HOST_READ)
) | {"numpy"}
"""Methods that move data between host and device: a value only moved may live on the host."""
_FROM_HOST_DATA = HOST_TENSORS | {"torch.tensor", "torch.as_tensor"}
"""Torch functions that take Python data (a buffer, a list, an array), not a tensor."""


def used_as_tensors(body: cst.BaseSuite, imports: ImportTable) -> frozenset[str]:
    """Names and attributes (`x`, `self.buf`) the function uses as device tensors: receivers of a
    method only tensors have (`x.div_(...)`, `loss.backward()`), the source of an in-place copy
    (`buf.copy_(src)`) and operands of a torch op (`torch.sum(x)`), not of a move
    (`batch.to(device)`: a batch from a loader lives on the host). What unknown code returned to
    such a name is taken as a tensor (`losses = self.forward_step(batch)`)."""
    used: set[str] = set()
    for current in descendants(body):
        if type(current) is not cst.Call:
            continue
        func = current.func
        qualified = imports.qualified(func)
        if isinstance(func, cst.Attribute) and qualified is None and (receiver := _holder(func.value)) is not None:
            method = func.attr.value
            if (_tensor_method(method) or method == "backward") and method not in _MOVES:
                used.add(receiver)
            if (
                api.method_op(method)[0] == api.COPY_INTO
                and current.args
                and (source := _holder(current.args[0].value))
            ):
                used.add(source)
        if qualified is not None and _reads_operands(qualified):
            used.update(
                name for arg in current.args if arg.keyword is None and (name := _holder(arg.value)) is not None
            )
    return frozenset(used)


def _reads_operands(qualified: str) -> bool:
    """Whether a torch function takes tensors as its positional arguments: an op or a factory
    shaped like one (`torch.empty_like(x)`), not a host helper, nor a factory of Python data or
    of a size (`torch.empty(n)`, `torch.full(size, n)`). Keywords are options (`pin_memory=flag`,
    `non_blocking=flag`)."""
    operation = api.operation(qualified)
    return (
        qualified.rpartition(".")[0] in TENSOR_MODULES
        and qualified not in HOST_TORCH
        and qualified not in _FROM_HOST_DATA
        and qualified not in FACTORIES  # sizes, a fill value, Python data: `torch.full(size, n)`
        and (operation is None or operation.kind is not Kind.ALLOC or qualified in SHAPED_LIKE)
    )


def _holder(node: cst.BaseExpression) -> str | None:
    """What a tensor expression is kept in: `x`, `self.buf`, or the container of an item
    (`state` for `state[key]`); None for metadata (`x.shape`) and anything else."""
    if isinstance(node, cst.Subscript):
        node = node.value
    name = dotted_name(node)
    if name is None or name.rpartition(".")[2] in HOST_ATTRIBUTES:
        return None
    return name


def kept_tensor_params(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters the caller keeps using as the same tensors after the call: annotated as tensors
    or receivers of a tensor method here (`t.div_(...)`, `t.narrow(...)`), and neither
    `record_stream`ed nor given a new attribute (`p.grad.data = ...`) here: a tensor whose
    lifetime the function hands to the allocator, or whose storage it swaps, is not overwritten
    by the caller in place. (`log=None` passed on, a list zipped: no evidence of a tensor.)"""
    params = parameters(function)
    names = {param.name.value for param in params} - {"self", "cls", "ctx"}
    used = {
        param.name.value
        for param in params
        if param.annotation is not None and tensor_annotation(param.annotation.annotation)
    }
    handed_off: set[str] = set()
    for current in descendants(function.body):
        if type(current) is cst.Call and isinstance(current.func, cst.Attribute):
            receiver = dotted_name(current.func.value) or ""
            root = receiver.split(".", 1)[0]
            if api.method_op(current.func.attr.value)[0] == api.RECORD_STREAM:
                handed_off.add(root)
            elif receiver in names and _tensor_method(current.func.attr.value):
                used.add(receiver)
        elif type(current) is cst.Assign:
            for target in current.targets:
                key = dotted_name(target.target) or ""
                if "." in key:
                    handed_off.add(key.split(".", 1)[0])
    return frozenset((used & names) - handed_off)


def metadata_params(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters the function only asks for metadata (`t.element_size() * t.nelement()`,
    `t.shape`, `t is None`, `len(t)`, `t.attr = v`): a tensor passed there is read by no kernel. Any other
    mention (an operator, a call, a rebinding, a nested function) is taken as a use of the data."""
    names = {param.name.value for param in parameters(function)}
    used: set[str] = set()
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        inner = _metadata_of_name(node)
        if inner is not None:
            stack.extend(inner)
            continue
        if type(node) is cst.Name and node.value in names:
            used.add(node.value)
        stack.extend(children(node))
    return frozenset(names - used - {"self", "cls"})


_ASKED = HOST_METHODS - {"untyped_storage"}
"""Methods that answer metadata (the storage may be freed through `untyped_storage()`)."""


def _metadata_of_name(node: cst.CSTNode) -> Sequence[cst.CSTNode] | None:
    """The parts left to look at when `node` asks a name for metadata only (`t.shape`,
    `t.size(d)`: `d`; `t is None`; `len(t)`); None if it is no such question."""
    if type(node) is cst.Attribute and isinstance(node.value, cst.Name) and node.attr.value in HOST_ATTRIBUTES:
        return ()
    if type(node) is cst.AssignTarget and isinstance(node.target, cst.Attribute) and dotted_name(node.target):
        return ()  # `t.state.done = v` sets a Python attribute: no kernel touches `t`
    if type(node) is cst.Call:
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.attr.value in _ASKED:
            return [arg.value for arg in node.args]
        if isinstance(func, cst.Name) and func.value in METADATA_BUILTINS:
            return [arg.value for arg in node.args if not isinstance(arg.value, cst.Name)]
    if type(node) is cst.Comparison and all(isinstance(t.operator, (cst.Is, cst.IsNot)) for t in node.comparisons):
        parts = (node.left, *(target.comparator for target in node.comparisons))
        return [part for part in parts if not isinstance(part, cst.Name)]
    return None


def calls_any(name: str, function: cst.FunctionDef, targets: set[str]) -> bool:
    """Whether `function` calls one of `targets` (module-level functions, functions nested in
    it, or methods of its own class): a helper with a stream block may leave its arguments
    written on that stream."""
    if not targets:
        return False
    owner = name.rpartition(".")[0]
    for callee in _callees(function.body):
        method = callee.removeprefix("self.")
        if method != callee and f"{owner}.{method}" in targets:
            return True
        if method == callee and (callee in targets or f"{name}.{callee}" in targets):
            return True
    return False


class Entry(NamedTuple):
    """The side stream every call of a function is made on, and the stream its callers wrote
    its arguments on: the current stream before their blocks when every call is in one, else
    that side stream (a caller entered on it made them there); `calls`: how many calls the
    module makes of it."""

    stream: str
    written_on: str
    calls: int


def entry_streams(
    body: Sequence[cst.CSTNode],
    imports: ImportTable,
    written: Counter[tuple[str, str]],
    functions: Mapping[str, cst.FunctionDef],
    globals_: frozenset[str],
) -> dict[str, Entry]:
    """Function (`f`, `Cls.m` for `self.m(...)`) -> the side stream every call of it in the module
    is made on: inside `with torch.cuda.stream(S):` (S spelled the same each time, or a local
    bound only to streams the function can name alike: "a or b" for a choice), or from the body of
    a function itself entered on S, outside any block. Only the bodies of stream blocks, and of
    the functions called there, are walked down to their expressions; that no call is made
    elsewhere is read from `written`, the module's calls of each name (`ModuleUses.calls`): each
    call `f(...)` (or `self.m(...)`) must be one of the calls found. A call in a function nested
    in a block runs where that function is called: not counted."""
    calls: dict[str, list[tuple[str | None, str]]] = {}
    statements: list[tuple[cst.CSTNode, str, cst.FunctionDef | None]] = [(node, "", None) for node in reversed(body)]
    while statements:
        node, owner, function = statements.pop()
        if isinstance(node, cst.ClassDef):
            owner, function = f"{owner}{node.name.value}.", None
        elif isinstance(node, cst.FunctionDef):
            function = node
        elif isinstance(node, cst.With):
            stream = _block_stream(node, function, imports)
            if stream is not None:
                _record_calls(node.body, owner, stream, function, imports, calls)
                continue
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            statements.extend((child, owner, function) for child in reversed(body_of(node.body)))
        elif isinstance(node, cst.BaseCompoundStatement):
            statements.extend((child, owner, function) for suite in _suites(node) for child in reversed(suite))
    if not calls:
        return {}
    walked: set[str] = set()
    unwalked = list(calls)
    while unwalked:  # the functions called in blocks, and those they call: who may be entered
        callee = unwalked.pop()
        if callee in functions and callee not in walked:
            walked.add(callee)
            owner = callee.rpartition(".")[0]
            known = set(calls)
            _record_calls(functions[callee].body, f"{owner}." if owner else "", None, functions[callee], imports, calls)
            unwalked.extend(calls.keys() - known)
    return _entered(calls, written, functions, globals_)


def _entered(
    calls: Mapping[str, list[tuple[str | None, str]]],
    written: Counter[tuple[str, str]],
    functions: Mapping[str, cst.FunctionDef],
    globals_: frozenset[str],
) -> dict[str, Entry]:
    """A greatest fixpoint: every function called is first taken as entered on the stream its
    calls are made on (None: only from functions not yet decided), and dropped once a call of it
    is made on another stream, from a function not entered, or not seen at all (the module makes
    more). Recursion needs no care: a cycle of calls that no block reaches enters nothing."""
    entered: dict[str, str | None] = {callee: None for callee in calls if callee in functions}
    changed = True
    while changed:
        changed = False
        for callee in list(entered):
            leaf = callee.rpartition(".")[2]
            count = written["self", leaf] + written["cls", leaf] if "." in callee else written["", leaf]
            sites = [stream or entered.get(caller, UNKNOWN) for stream, caller in calls[callee]]
            streams = {stream for stream in sites if stream is not None}  # None: callers still open
            if (
                count != len(calls[callee])
                or len(streams) > 1
                or not all(_named_alike(stream, functions[callee], globals_) for stream in streams)
            ):
                del entered[callee]
                changed = True
            elif streams and entered[callee] is None:
                entered[callee] = streams.pop()
                changed = True
    return {
        callee: Entry(
            stream, CURRENT if all(block is not None for block, _ in calls[callee]) else stream, len(calls[callee])
        )
        for callee, stream in entered.items()
        if stream is not None and stream != CURRENT
    }


def _named_alike(stream: str, function: cst.FunctionDef, globals_: frozenset[str]) -> bool:
    """Whether the callers' spelling of a stream names the same stream inside `function`: each
    choice the current stream, or rooted at `self`/`cls`, a module global, or a parameter of the
    same name (`state.s`)."""
    names = {param.name.value for param in parameters(function)}
    for part in alternatives(stream):
        first = root(part)
        if part != CURRENT and first not in ("self", "cls") and first not in globals_ and first not in names:
            return False
    return True


def _block_stream(node: cst.With, function: cst.FunctionDef | None, imports: ImportTable) -> str | None:
    """The stream a `with` enters, as its callees would spell it: None if it enters none, UNKNOWN
    if no one stream (a choice written in the item, a local bound otherwise than to streams)."""
    for item in node.items:
        streams = entered_streams(item.item, imports)
        if streams is not None:
            return _spelled(streams[0], function, imports) if len(streams) == 1 else UNKNOWN
    return None


def _spelled(stream: cst.BaseExpression, function: cst.FunctionDef | None, imports: ImportTable) -> str:
    """A stream expression's token: CURRENT, a dotted name, or for a local name the choice of the
    streams it is bound to in `function` (`stream = self.s` on one path, `current_stream()` on
    the other: "<current> or self.s")."""
    if isinstance(stream, cst.Call) and imports.qualified(stream.func) == CURRENT_STREAM:
        return CURRENT
    if not isinstance(stream, cst.Name) or function is None or not (bound := _assigned(function, stream.value)):
        return code_of(stream)
    tokens = [_bound_stream(value, imports) if value is not None else None for value in bound]
    if None in tokens or stream.value in {param.name.value for param in parameters(function)}:
        return UNKNOWN  # a parameter rebound may still be the caller's stream
    return choice(tokens) or UNKNOWN


def _bound_stream(value: cst.BaseExpression, imports: ImportTable) -> str | None:
    """The token of a stream a name is bound to (`self.s`, `current_stream()`, `a if c else b`),
    None for anything else."""
    if isinstance(value, cst.IfExp):
        sides = [_bound_stream(side, imports) for side in (value.body, value.orelse)]
        return None if None in sides else choice(sides)
    if isinstance(value, cst.Call) and imports.qualified(value.func) == CURRENT_STREAM:
        return CURRENT
    return dotted_name(value)


def _assigned(function: cst.FunctionDef, name: str) -> list[cst.BaseExpression | None]:
    """The values `name` is assigned in `function` (not in nested scopes), None for a binding
    of no one value (a loop target, `with ... as`, `+=`, an item of a tuple target)."""
    found: list[cst.BaseExpression | None] = []
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda, *COMPREHENSIONS)):
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name) and target.target.value == name:
                    found.append(node.value)
                elif name in target_names(target.target):
                    found.append(None)
        elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name) and node.target.value == name:
            found.append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.For, cst.NamedExpr)) and name in target_names(node.target):
            found.append(None)
        elif isinstance(node, cst.AsName) and name in target_names(node.name):
            found.append(None)
        stack.extend(children(node))
    return found


def _record_calls(
    block: cst.BaseSuite,
    owner: str,
    stream: str | None,
    function: cst.FunctionDef | None,
    imports: ImportTable,
    calls: dict[str, list[tuple[str | None, str]]],
) -> None:
    """Records the calls made in a stream block's body, each on the innermost block's stream;
    given no stream, the calls of `function`'s body outside its blocks (recorded with the
    module's blocks), each with `function` as its caller. Walked with a stack: expressions may
    nest deeper than the interpreter's recursion limit."""
    caller = "" if function is None else f"{owner}{function.name.value}"
    stack: list[tuple[cst.CSTNode, str | None]] = [(block, stream)]
    while stack:
        node, current = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue  # runs where it is called
        if isinstance(node, cst.With):
            entered = _block_stream(node, function, imports)
            if entered is not None and stream is None:
                continue
            current = entered or current
        elif isinstance(node, cst.Call):
            func = node.func
            callee = func.value if isinstance(func, cst.Name) else None
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value in ("self", "cls")
            ):
                callee = f"{owner}{func.attr.value}" if owner else None
            if callee is not None:
                calls.setdefault(callee, []).append((current, caller))
        stack.extend((child, current) for child in reversed(children(node)))


def module_globals(module: cst.Module, imports: ImportTable) -> frozenset[str]:
    """Names bound at the top of the module: streams and events they denote mean the same everywhere."""
    names = set(imports.names)
    for node in module.body:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.add(node.name.value)
        elif isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                targets = (
                    [target.target for target in small.targets]
                    if isinstance(small, cst.Assign)
                    else [small.target]
                    if isinstance(small, cst.AnnAssign)
                    else []
                )
                for target in targets:
                    names.update(target_names(target))
    return frozenset(names)


def resolve_relative(imports: Sequence[cst.ImportFrom], path: str) -> dict[str, str]:
    """Local name -> dotted name for `from .helpers import f` in the package `path` is in."""
    package = module_name(path).split(".")
    if not path.replace("\\", "/").endswith("/__init__.py") and path != "__init__.py":
        package = package[:-1]
    table: dict[str, str] = {}
    for node in imports:
        if isinstance(node.names, cst.ImportStar):
            continue
        up = len(node.relative) - 1
        if up > len(package):
            continue
        base = package[: len(package) - up]
        module = dotted_name(node.module) if node.module is not None else ""
        if module is None:
            continue
        prefix = ".".join([*base, module] if module else base)
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is not None and prefix:
                local = (
                    alias.asname.name.value
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                    else name
                )
                table[local] = f"{prefix}.{name}"
    return table


def scan(
    body: Sequence[cst.CSTNode],
    imports: ImportTable,
    functions: list[tuple[str, cst.FunctionDef]],
    prefix: str,
    classes: dict[str, list[str]],
    relative: list[cst.ImportFrom],
) -> bool:
    """Collects imports, function definitions and class names (dotted like the functions');
    True if `body` itself has a `with` (not in a def)."""
    has_with = False
    for node in body:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.ImportFrom) and small.relative:
                    relative.append(small)
                elif isinstance(small, (cst.Import, cst.ImportFrom, cst.Assign, cst.AnnAssign)):
                    imports.add(small)  # an assignment may bind an accelerator object
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            name = f"{prefix}{node.name.value}"
            if isinstance(node, cst.FunctionDef):
                functions.append((name, node))
                imports.add(node)  # a property may return the current stream
            else:
                classes[name] = [base for arg in node.bases if (base := dotted_name(arg.value)) is not None]
            scan(body_of(node.body), imports, functions, f"{name}.", classes, relative)
        elif isinstance(node, cst.BaseCompoundStatement):
            has_with |= isinstance(node, cst.With)
            for suite in _suites(node):
                has_with |= scan(suite, imports, functions, prefix, classes, relative)
    return has_with


def _suites(node: cst.BaseCompoundStatement) -> Iterator[Sequence[cst.CSTNode]]:
    if not isinstance(node, cst.Match):
        yield body_of(node.body)
    for part in ("orelse", "finalbody"):
        child = getattr(node, part, None)
        if isinstance(child, cst.If):
            yield [child]
        elif child is not None:
            yield body_of(child.body)
    for handler in getattr(node, "handlers", ()):
        yield body_of(handler.body)
    for case in getattr(node, "cases", ()):
        yield body_of(case.body)


def has_with(
    body: Sequence[cst.CSTNode], imports: ImportTable | None = None, contexts: ContextFunctions = NO_FUNCTIONS
) -> bool:
    """Whether `body` has a `with` outside nested definitions; given `imports`, one that may
    enter a stream (any spelling of a stream context, or a context object bound elsewhere)."""
    for node in body:
        if isinstance(node, cst.With) and (
            imports is None
            or any(
                not isinstance(item.item, cst.Call) or entered_streams(item.item, imports, contexts) is not None
                for item in node.items
            )
        ):
            return True
        if (
            isinstance(node, cst.BaseCompoundStatement)
            and not isinstance(node, (cst.FunctionDef, cst.ClassDef))
            and any(has_with(suite, imports, contexts) for suite in _suites(node))
        ):
            return True
    return False


@lru_cache(maxsize=256)
def tensor_params(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters that may be tensors: unannotated ones (but `self`, `cls` and autograd's `ctx`),
    those whose annotation names a tensor (`Tensor`, `Optional[torch.Tensor]`, `list[Tensor]`...),
    and those `x.record_stream(s)` is called on, whatever their type says (a batch of tensors).

    Kept for the last few hundred functions (nodes hash by identity): a function's summary and
    its own analysis both ask, and the `record_stream` walk covers the whole body."""
    names = set()
    recorded: set[str] | None = None
    for param in parameters(function):
        name = param.name.value
        if name in ("self", "cls", "ctx"):
            continue
        annotation = param.annotation
        if annotation is not None and not tensor_annotation(annotation.annotation):
            if recorded is None:
                recorded = {
                    call.func.value.value
                    for call in record_stream_calls(function)
                    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
                }
            if name not in recorded:
                continue
        names.add(name)
    return frozenset(names)
