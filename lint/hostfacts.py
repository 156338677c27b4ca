"""What the host-side interpreter (lint/hostflow.py) knows about a module and its expressions
before interpreting it: imports, functions, attributes pinned anywhere, which functions
synchronize, and the shapes of copies and pinning calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.devices import Place, place_of_device
from csan_lint.lint.hostattributes import SelfAttributes, view_base
from csan_lint.lint.names import DEVICE_SYNC, ImportTable, dotted_name
from csan_lint.lint.nodes import children, descendants
from csan_lint.lint.recognize import ContextFunctions
from csan_lint.lint.run_facts import NO_MODULE_FACTS as NO_OBSERVED_FACTS
from csan_lint.lint.run_facts import ModuleFacts as ObservedFacts


def is_self(expr: cst.BaseExpression) -> bool:
    """`self.capture_begin()`, `super().capture_begin()`: a graph class wrapping its own
    capture, on whatever stream its caller made current."""
    if isinstance(expr, cst.Call):
        return isinstance(expr.func, cst.Name) and expr.func.value == "super"
    return isinstance(expr, cst.Name) and expr.value == "self"


def target_keys(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from target_keys(element.value)
    elif isinstance(target, cst.BaseExpression) and (key := dotted_name(target)) is not None:
        yield key


def written_buffer(expr: cst.BaseExpression) -> str | None:
    """The buffer an expression writes through: `buf`, `buf[i]`, `self.buf[:n]`, a view of one
    (`self.buf[:n].numpy()[:]`)."""
    if (base := view_base(expr)) is not None:
        return base
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted_name(expr)


def viewed_buffer(expr: cst.BaseExpression) -> str | None:
    """The buffer whose memory `expr` is: `buf`, or a definite view of it (`self.buf[:n]`,
    `buf[0].view(t)`, lint/hostattributes.py); None for a gather (`buf[idx]`), new memory."""
    return view_base(expr) or dotted_name(expr)


def is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def non_blocking(call: cst.Call, true: frozenset[str] = frozenset()) -> bool:
    """`non_blocking=True`, or a name that holds `True` (`true`): the host does not wait for the copy."""
    return any(
        arg.keyword is not None
        and arg.keyword.value == api.NON_BLOCKING
        and (is_true(arg.value) or dotted_name(arg.value) in true)
        for arg in call.args
    )


def untold_flag(call: cst.Call, true: frozenset[str] = frozenset()) -> bool:
    """`non_blocking=` given a value the code does not tell (not `True`, `False` or a name
    holding `True`): `non_blocking=self.non_blocking`, `non_blocking=supports(d)`."""
    return may_not_block(call) and not non_blocking(call, true)


def may_not_block(call: cst.Call) -> bool:
    """`non_blocking=` given and not `False` (`non_blocking=self.non_blocking`): the host may
    not wait for the copy."""
    return any(
        arg.keyword is not None
        and arg.keyword.value == api.NON_BLOCKING
        and not (isinstance(arg.value, cst.Name) and arg.value.value == "False")
        for arg in call.args
    )


def pins(expr: cst.CSTNode) -> bool:
    """The expression makes pinned host memory: `.pin_memory()`, `pin_memory=True`."""
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and api.method_op(expr.func.attr.value)[0] == api.PIN:
            return True
        if any(
            arg.keyword is not None and arg.keyword.value == api.PIN_MEMORY and is_true(arg.value) for arg in expr.args
        ):
            return True
    return any(pins(child) for child in host_children(expr) if not isinstance(child, (cst.Lambda, cst.FunctionDef)))


@dataclass(frozen=True)
class Given:
    """What some call of a function of the module gives its parameters, or their defaults do."""

    host: frozenset[str] = frozenset()
    """Parameters given the host as a device (`"cpu"`, `torch.device("cpu")`)."""
    true: frozenset[str] = frozenset()
    """Parameters given `True` (`non_blocking=non_blocking` copies without waiting)."""
    pinned: Mapping[str, str] = field(default_factory=dict)
    """Parameters a test run saw given pinned host memory -> the observation (lint/run_facts.py)."""
    download: str | None = None
    """A test run saw the function copy to the host without blocking: the observation."""


@dataclass
class ModuleFacts:
    imports: ImportTable = field(default_factory=ImportTable)
    functions: dict[str, list[cst.FunctionDef]] = field(default_factory=dict)
    """Same-module functions and methods by their bare name."""
    pinned: set[str] = field(default_factory=set)
    """`self.x` attributes assigned pinned memory somewhere in the module."""
    attributes: SelfAttributes = field(default_factory=SelfAttributes)
    """Where `self.x` attributes are bound and which are views of which (only if `pins`)."""
    pins: bool = True
    """The module pins host memory somewhere (lint/analysis/uses.py): if not, no expression needs
    looking into."""
    syncing: bool = True
    """The module synchronizes the device, a stream or an event somewhere: if not, no function does."""
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS
    module: cst.Module | None = None
    """The module whose calls give its functions' parameters values (`given`)."""
    classes: set[str] = field(default_factory=set)
    """The names of the module's classes: constructing one hands its arguments on."""
    reads: dict[tuple[cst.FunctionDef, str], frozenset[str] | None] = field(default_factory=dict)
    """(function, parameter) -> whether the function reads it on the host: the assumptions that
    rests on, None if not or while being worked out, so that recursion ends (lint/hostflow.py)."""
    _syncing: dict[str, bool] = field(default_factory=dict)
    observed: ObservedFacts = NO_OBSERVED_FACTS
    """What test runs saw of the module's functions (lint/run_facts.py)."""
    qualnames: dict[cst.FunctionDef, str] = field(default_factory=dict)
    """Each function's name as Python qualifies it (`Class.method`), as runs name it."""
    _given: dict[cst.FunctionDef, Given] | None = None
    _called: frozenset[cst.FunctionDef] = frozenset()
    _downloads_returned: dict[cst.FunctionDef, bool] = field(default_factory=dict)

    def returns_download(self, callees: Sequence[cst.FunctionDef], run: Callable[[cst.FunctionDef], bool]) -> bool:
        """Whether a definition of a called function returns host memory a non-blocking copy
        may still be writing (`run` works it out: lint/hostflow.py), once per function."""
        for function in callees:
            if function not in self._downloads_returned:
                self._downloads_returned[function] = False  # a recursive call returns nothing more
                self._downloads_returned[function] = run(function)
            if self._downloads_returned[function]:
                return True
        return False

    def callees(self, call: cst.Call) -> tuple[Sequence[cst.FunctionDef], bool]:
        """The definitions of the module's function a call by name reaches (`f(...)`, or
        `self.f(...)`: bound, its first parameter `self`); none for any other call."""
        func = call.func
        if isinstance(func, cst.Name):
            return self.functions.get(func.value, ()), False
        if isinstance(func, cst.Attribute) and is_self(func.value):
            return self.functions.get(func.attr.value, ()), True
        return (), False

    def called(self, function: cst.FunctionDef) -> bool:
        """Some code of the module calls `function` by name (`f(...)`, `self.f(...)`)."""
        self._find_calls()
        return function in self._called

    def _find_calls(self) -> None:
        if self._given is None and self.module is not None:
            self._given, self._called = _given_at_calls(self.module, self)

    def given(self, function: cst.FunctionDef) -> Given:
        """What the calls of `function` in the module (found once) and its defaults give its
        parameters: each value holds in the context of one call, and so inside the function."""
        self._find_calls()
        defaults = {
            param.name.value
            for param in (*function.params.params, *function.params.kwonly_params)
            if param.default is not None and is_true(param.default)
        }
        found = self._given.get(function, Given()) if self._given is not None else Given()
        pinned = self.observed_pinned(function)
        return Given(found.host | set(pinned), found.true | defaults, pinned, self.observed_download(function))

    @cached_property
    def contexts(self) -> ContextFunctions:
        """The module's functions that enter a stream for their caller (`with self._on(s):`)."""
        return ContextFunctions((f for same_name in self.functions.values() for f in same_name), self.imports)

    def observed_download(self, function: cst.FunctionDef | None) -> str | None:
        """A run saw `function` copy to the host without blocking: its flags the code does not
        tell held `True` there (the observation, as a finding lists it)."""
        return self.observed.non_blocking_download(self.qualnames.get(function)) if function is not None else None

    def observed_pinned(self, function: cst.FunctionDef | None) -> dict[str, str]:
        """`function`'s parameters a run saw handed pinned host memory -> the observation."""
        if function is None:
            return {}
        qualname = self.qualnames.get(function)
        names = (param.name.value for param in (*function.params.params, *function.params.kwonly_params))
        return {name: seen for name in names if (seen := self.observed.pinned_argument(qualname, name)) is not None}

    def syncs(self, name: str) -> bool:
        """A same-module function of that name synchronizes the host somewhere in its body."""
        if not self.syncing:
            return False
        if name not in self._syncing:
            self._syncing[name] = any(finds(function.body, self._is_sync) for function in self.functions.get(name, ()))
        return self._syncing[name]

    def reads_on_host(
        self,
        callees: Sequence[cst.FunctionDef],
        parameter: str | None,
        run: Callable[[cst.FunctionDef, str], frozenset[str] | None],
    ) -> frozenset[str] | None:
        """What a callee's reading `parameter` on the host rests on, if any definition of it
        does (`run` works one out: lint/hostflow.py), once per function and parameter."""
        if parameter is None:
            return None
        for function in callees:
            if (function, parameter) not in self.reads:
                self.reads[function, parameter] = None  # a recursive call reads nothing more
                self.reads[function, parameter] = run(function, parameter)
            if (rests_on := self.reads[function, parameter]) is not None:
                return rests_on
        return None

    def _is_sync(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        return self.imports.qualified(func) == DEVICE_SYNC or (
            isinstance(func, cst.Attribute) and api.method_op(func.attr.value)[0] == api.SYNC_RECEIVER
        )


def scan_facts(
    body: Sequence[cst.CSTNode],
    facts: ModuleFacts,
    function: cst.FunctionDef | None = None,
    owner: cst.ClassDef | None = None,
    prefix: str = "",
) -> None:
    """Imports, function definitions (with their qualified names: `prefix`), pinned attributes
    and attribute bindings, by statements: a libcst visitor would cost as much as the parse."""
    for node in body:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, (cst.Import, cst.ImportFrom, cst.Assign)):
                    facts.imports.add(small)  # an assignment may bind an accelerator object
                if isinstance(small, cst.Assign) and facts.pins:
                    for target in small.targets:
                        facts.attributes.bind(target.target, small.value, function)
                elif isinstance(small, cst.AnnAssign) and facts.pins and small.value is not None:
                    facts.attributes.bind(small.target, small.value, function)
                if isinstance(small, cst.Assign) and facts.pins and pins(small.value):
                    facts.pinned.update(
                        key
                        for target in small.targets
                        if (key := dotted_name(target.target)) is not None and key.startswith("self.")
                    )
        elif isinstance(node, cst.FunctionDef):
            facts.functions.setdefault(node.name.value, []).append(node)
            facts.qualnames[node] = f"{prefix}{node.name.value}"
            facts.imports.add(node)  # a property may return the current stream
            if owner is not None:
                facts.attributes.owners[node] = owner
            scan_facts(node.body.body, facts, node, prefix=f"{prefix}{node.name.value}.<locals>.")
        elif isinstance(node, cst.ClassDef):
            facts.classes.add(node.name.value)
            scan_facts(node.body.body, facts, function, node, f"{prefix}{node.name.value}.")
        elif isinstance(node, cst.BaseCompoundStatement):
            for suite in _suites(node):
                scan_facts(suite, facts, function, owner, prefix)


def _given_at_calls(
    module: cst.Module, facts: ModuleFacts
) -> tuple[dict[cst.FunctionDef, Given], frozenset[cst.FunctionDef]]:
    """Per function of the module, what its calls by name (`f(...)`, `self.f(...)`) give it; and
    the functions called so."""
    host: dict[cst.FunctionDef, set[str]] = {}
    true: dict[cst.FunctionDef, set[str]] = {}
    called: set[cst.FunctionDef] = set()
    for node in descendants(module):
        if type(node) is not cst.Call:
            continue
        callees, bound = facts.callees(node)
        if not callees:
            continue
        called.update(callees)
        for position, arg in enumerate(node.args):
            if is_true(arg.value):
                found = true
            elif place_of_device(arg.value, facts.imports, lambda _: None) is Place.HOST:
                found = host
            else:
                continue
            parameter = parameter_given(callees, position, arg, bound=bound)
            if parameter is not None:
                for callee in callees:
                    found.setdefault(callee, set()).add(parameter)
    given = {
        function: Given(frozenset(host.get(function, ())), frozenset(true.get(function, ())))
        for function in host.keys() | true.keys()
    }
    return given, frozenset(called)


def parameter_given(callees: Sequence[cst.FunctionDef], position: int, arg: cst.Arg, *, bound: bool) -> str | None:
    """The parameter of the callee an argument binds (`bound`: called as a method, so the first
    parameter is `self`), if every definition of the name agrees on it."""
    if arg.star:
        return None
    if arg.keyword is not None:
        return arg.keyword.value
    names = set()
    for function in callees:
        positional = [param.name.value for param in (*function.params.posonly_params, *function.params.params)]
        if bound and positional and positional[0] in ("self", "cls"):
            positional = positional[1:]
        names.add(positional[position] if position < len(positional) else None)
    return names.pop() if len(names) == 1 else None


def _suites(node: cst.BaseCompoundStatement) -> Iterator[Sequence[cst.CSTNode]]:
    if not isinstance(node, cst.Match):
        yield node.body.body
    for part in ("orelse", "finalbody"):
        child = getattr(node, part, None)
        if isinstance(child, cst.If):
            yield [child]
        elif child is not None:
            yield child.body.body
    for handler in getattr(node, "handlers", ()):
        yield handler.body.body
    for case in getattr(node, "cases", ()):
        yield case.body.body


def finds(node: cst.CSTNode, predicate: Callable[[cst.CSTNode], bool]) -> bool:
    return predicate(node) or any(finds(child, predicate) for child in host_children(node))


def host_children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """The sub-nodes that matter here of common nodes (the values, not the punctuation), and
    all the children of the others."""
    fields = _FIELDS.get(type(node))
    return children(node) if fields is None else fields(node)


_FIELDS: dict[type[cst.CSTNode], Callable[[Any], Sequence[cst.CSTNode]]] = {
    cst.Name: lambda _: (),
    cst.Integer: lambda _: (),
    cst.Float: lambda _: (),
    cst.SimpleString: lambda _: (),
    cst.Attribute: lambda node: (node.value,),
    cst.Call: lambda node: (node.func, *(arg.value for arg in node.args)),
    cst.BinaryOperation: lambda node: (node.left, node.right),
    cst.BooleanOperation: lambda node: (node.left, node.right),
    cst.UnaryOperation: lambda node: (node.expression,),
    cst.Comparison: lambda node: (node.left, *(target.comparator for target in node.comparisons)),
    cst.Tuple: lambda node: tuple(element.value for element in node.elements),
    cst.List: lambda node: tuple(element.value for element in node.elements),
    cst.Set: lambda node: tuple(element.value for element in node.elements),
    cst.Subscript: lambda node: (node.value, *node.slice),
    cst.SubscriptElement: lambda node: (node.slice,),
    cst.Index: lambda node: (node.value,),
    cst.IfExp: lambda node: (node.test, node.body, node.orelse),
    cst.Await: lambda node: (node.expression,),
    cst.StarredElement: lambda node: (node.value,),
    cst.IndentedBlock: lambda node: node.body,
    cst.SimpleStatementLine: lambda node: node.body,
    cst.Expr: lambda node: (node.value,),
    cst.Assign: lambda node: (node.value,),
    cst.Return: lambda node: (node.value,) if node.value is not None else (),
    cst.If: lambda node: (node.test, node.body, *((node.orelse,) if node.orelse else ())),
    cst.Else: lambda node: (node.body,),
    cst.For: lambda node: (node.iter, node.body),
    cst.While: lambda node: (node.test, node.body),
    cst.With: lambda node: (*(item.item for item in node.items), node.body),
}
