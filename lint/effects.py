"""Effects of calls: function summaries built by running a function on symbolic arguments,
and their replay at call sites.

Calls are followed through summaries (lint/summaries.py): a called function of the module, a
method called as `self.m()`, or a module-level function of another linted module is run once
on symbolic arguments, with a probe access per stream or event it orders on; the orderings that
hold on every return, and the parameters and `self` attributes it leaves written (or read on
another stream) and on which stream, are replayed at each call site in the caller's streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import libcst as cst

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from csan_lint.lint.analysis.tokens import CURRENT, HOST, event_name, event_token, issued_on, rebased, root
from csan_lint.lint.annotations import host_positions
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import children
from csan_lint.lint.ordering import Access, FactUpdate, FlowState, Mark, TrackedTensor
from csan_lint.lint.receivers import Receivers
from csan_lint.lint.recognize import ContextFunctions
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts
from csan_lint.lint.scan import metadata_params, used_as_tensors
from csan_lint.lint.summaries import ANY_OTHER, RETURNED, PackageIndex, Summary, returned_key, returned_position

if TYPE_CHECKING:
    from collections.abc import Callable

_MAX_SUMMARY_DEPTH = 16
"""Calls followed inside a summary: a generated chain of thousands would exhaust the stack."""

_PROBE_NODE = cst.Name("probe")
PROBE_ACCESS = Access(_PROBE_NODE, ANY_OTHER, True, _PROBE_NODE)
"""The access a probe stands for: one made before the call, on the probe's token."""


def _is_super(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "super"


def _on_self(func: cst.BaseExpression) -> bool:
    """`self.m`, `cls.m`, `super().m`: a method of the caller's class or of its bases."""
    if not isinstance(func, cst.Attribute):
        return False
    receiver = func.value
    return _is_super(receiver) or (isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"))


def _unbound(function: cst.FunctionDef) -> bool:
    """A static or class method: called on its class, its parameters line up with the call's
    arguments (a plain method's `self` would take the first one)."""
    return any(dotted_name(d.decorator) in ("staticmethod", "classmethod") for d in function.decorators)


def probe_key(token: str) -> str:
    """The state key of the probe for `token`: no name in source spells it."""
    return f"\0{token}"


def _argument(summary: Summary, call: cst.Call, param: str) -> cst.BaseExpression | None:
    """The expression a call passes for `param`, None if left to its default or unknowable."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return arg.value
    if param not in summary.params:
        return None
    index = summary.params.index(param)
    positional = []
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            positional.append(arg.value)
    return positional[index] if index < len(positional) else None


@dataclass(frozen=True)
class Callee:
    summary: Summary
    same_module: bool
    """Module globals named in the summary mean the same at the call site."""
    receiver: str | None
    """The caller's name for the called method's `self` (`self` for `self.m(...)`, `self.loader`
    for `self.loader.stage(...)`): the summary's `self.x` are its attributes; None if unnamed."""


class Helpers:
    """Summaries of the functions a call may reach: the module's own functions and methods,
    and the module-level functions of other linted modules (`package`), each built on first call."""

    def __init__(
        self,
        imports: ImportTable,
        functions: dict[str, cst.FunctionDef],
        globals_: frozenset[str],
        package: PackageIndex | None = None,
        relative: Mapping[str, str] | None = None,
        classes: Mapping[str, Sequence[str]] | None = None,
        assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
        observed: ModuleFacts = NO_MODULE_FACTS,
        waiting: frozenset[str] | None = None,
    ) -> None:
        self.imports = imports
        self.waiting = waiting
        """Streams some code of the module may make wait (`ModuleUses.waiting`); None: not known."""
        self.assumptions = assumptions
        """What the module's analysis assumes where code does not show it (lint/analysis/assumptions.py)."""
        self.observed = observed
        """What test runs observed of the module's functions (lint/run_facts.py): it settles assumptions."""
        self.functions = functions
        self.globals = globals_
        self.package = package
        self.relative = relative or {}
        self.classes = classes or {}
        """Classes of the module -> their base classes as spelled (`Base`, `mod.Base`)."""
        self.summaries: dict[tuple[str, frozenset[str]], Summary | None] = {}
        """By function and the stream parameters given the caller's current stream (`summary`)."""
        self.metadata: dict[str, frozenset[str]] = {}
        """Function -> the parameters it only asks for metadata (`metadata_params`)."""
        self.receivers = Receivers(functions, self.classes)
        """Objects of the module's classes that methods are called on (`self.loader.stage(x)`)."""
        self.instances = Receivers(functions, self.classes, {name: () for name in (*imports.names, *self.relative)})
        """Objects of imported classes (`comm = Comm()`, `self.comm = Comm()`): their methods'
        summaries are other linted modules' (`package`)."""
        self.contexts = ContextFunctions(functions.values(), imports)
        """The module's functions that enter a stream for their caller (`with self._on(s):`)."""
        self.depth = 0
        """Summaries being built, each inside the last: deep call chains stop at _MAX_SUMMARY_DEPTH."""
        self._tensor_attributes: frozenset[str] | None = None

    def tensor_attribute(self, key: str) -> bool:
        """`self.x` that some function of the module uses as a tensor (`scan.used_as_tensors`):
        read elsewhere, it is one too, whoever wrote it."""
        return key in self.tensor_attributes()

    def tensor_attributes(self) -> frozenset[str]:
        """Every such `self.x` of the module."""
        if self._tensor_attributes is None:
            self._tensor_attributes = frozenset(
                used
                for function in self.functions.values()
                for used in used_as_tensors(function.body, self.imports)
                if used.startswith("self.")
            )
        return self._tensor_attributes

    def lookup(
        self,
        caller: str | None,
        func: cst.BaseExpression,
        qualified: str | None,
        on_current: frozenset[str] = frozenset(),
    ) -> Callee | None:
        """A function of the module (`callee`), or for `mod.helper(...)` or an imported name a
        function of another linted module; `on_current`: as in `summary`."""
        name = self.callee(caller, func)
        if name is not None or _on_self(func):
            summary = self.summary(name, on_current) if name is not None else None
            return Callee(summary, True, self._receiver(func)) if summary is not None else None
        if (method := self._imported_method(caller, func)) is not None:
            summary = self.package.summary(method, on_current) if self.package is not None else None
            assert isinstance(func, cst.Attribute)  # `_imported_method` names only methods
            return Callee(summary, False, dotted_name(func.value)) if summary is not None else None
        summary = self.imported(dotted_name(func), qualified, on_current)
        return Callee(summary, False, None) if summary is not None else None

    def _imported_method(self, caller: str | None, func: cst.BaseExpression) -> str | None:
        """`pkg.comm.Comm.send` for `comm.send(...)` where `comm = Comm()` and `Comm` is imported
        from `pkg.comm`; None for any other call."""
        if self.package is None or not isinstance(func, cst.Attribute) or _on_self(func):
            return None
        maker = self.instances.class_of(caller, func.value)
        qualified = (self.relative.get(maker) or self.imports.qualified(cst.Name(maker))) if maker else None
        return f"{qualified}.{func.attr.value}" if qualified is not None else None

    def callee(self, caller: str | None, func: cst.BaseExpression) -> str | None:
        """The module's function a call reaches: `helper(...)`, a function nested in the caller or
        a module-level one; `self.helper(...)`, a method of the caller's class or one it inherits
        from a class of the module; `super().helper(...)`, one of its bases'."""
        if isinstance(func, cst.Name):
            return self._scoped(caller, func.value)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in self.classes:
            name = self._method(func.value.value, func.attr.value, inherited=False)  # `Other.helper(...)`
            return name if name is not None and _unbound(self.functions[name]) else None
        if isinstance(func, cst.Attribute) and not _on_self(func) and func.attr.value in self.receivers.method_names:
            owner = self.receivers.class_of(caller, func.value)  # `self.loader.stage(...)`, `loader.stage(...)`
            return self._method(owner, func.attr.value, inherited=False) if owner is not None else None
        if not (_on_self(func) and caller is not None and "." in caller):
            return None
        assert isinstance(func, cst.Attribute)
        return self._method(caller.rsplit(".", 1)[0], func.attr.value, inherited=_is_super(func.value))

    def calls_imported_writers(self, caller: str, function: cst.FunctionDef) -> bool:
        """Whether `function` calls a method of an imported class that works on another stream
        (`comm.send(y)`, `comm = Comm()`): its arguments may be used there."""
        if self.package is None or not (self.imports.names or self.relative):
            return False
        stack: list[cst.CSTNode] = [function.body]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Call) and (method := self._imported_method(caller, node.func)) is not None:
                summary = self.package.summary(method)
                if summary is not None and any(effect.stream != CURRENT for effect in summary.effects):
                    return True
            stack.extend(children(node))
        return False

    def _receiver(self, func: cst.BaseExpression) -> str | None:
        """`Callee.receiver` of a call of the module's function `func`."""
        if _on_self(func):
            return "self"
        if not isinstance(func, cst.Attribute) or dotted_name(func.value) in self.classes:
            return None  # a function, or `Cls.static(...)`
        return dotted_name(func.value)

    def calls_on_receivers(self, caller: str, function: cst.FunctionDef, targets: set[str]) -> bool:
        """Whether `function` calls one of `targets` on an object of a class of the module."""
        if not targets:
            return False
        return any(self.callee(caller, call.func) in targets for call in self.receivers.calls(function))

    def metadata_args(self, caller: str | None, call: cst.Call) -> frozenset[int]:
        """The ids of the arguments a call of the module's function passes for parameters it
        only asks for metadata (`self._num_bytes(t)`): naming a tensor there reads no data."""
        name = self.callee(caller, call.func)
        if name is None:
            return frozenset()
        if name not in self.metadata:
            self.metadata[name] = metadata_params(self.functions[name])
        asked = self.metadata[name]
        params = self.functions[name].params
        positional = [param.name.value for param in (*params.posonly_params, *params.params)]
        if isinstance(call.func, cst.Attribute) and positional[:1] in (["self"], ["cls"]):
            positional = positional[1:]  # bound by the call
        found = set()
        for index, arg in enumerate(call.args):
            if arg.star:
                break  # the later positions are unknown
            if arg.keyword is not None:
                param: str | None = arg.keyword.value
            else:
                param = positional[index] if index < len(positional) else None
            if param in asked:
                found.add(id(arg.value))
        return frozenset(found)

    def defined(self, caller: str | None, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The module's function `name(...)` calls from inside `caller`: nested in it or in a
        function around it, or at module level."""
        name = self._scoped(caller, func.value) if isinstance(func, cst.Name) else None
        return self.functions[name] if name is not None else None

    def _scoped(self, caller: str | None, name: str) -> str | None:
        """The module's function a bare `name` is inside `caller`: nested in it or in a function
        around it (a class body encloses no function), or at module level."""
        scope = caller or ""
        while scope:
            if scope not in self.classes and f"{scope}.{name}" in self.functions:
                return f"{scope}.{name}"
            scope = scope.rpartition(".")[0]
        return name if name in self.functions else None

    def _method(self, owner: str, name: str, *, inherited: bool) -> str | None:
        """`Owner.name`, or (`inherited`: only) the first base class of the module, depth first,
        that defines it."""
        seen: set[str] = set()
        stack = list(reversed(self.classes.get(owner, ()))) if inherited else [owner]
        while stack:
            cls = stack.pop()
            if cls in seen:
                continue
            seen.add(cls)
            if f"{cls}.{name}" in self.functions:
                return f"{cls}.{name}"
            stack.extend(reversed(self.classes.get(cls, ())))
        return None

    def imported(
        self, dotted: str | None, qualified: str | None, on_current: frozenset[str] = frozenset()
    ) -> Summary | None:
        """The summary of a function of another linted module, called as `dotted` here."""
        if self.package is None:
            return None
        root, _, rest = (dotted or "").partition(".")
        target = self.relative.get(root)
        if target is not None:
            qualified = f"{target}.{rest}" if rest else target
        if qualified is None or qualified.startswith("torch."):
            return None
        return self.package.summary(qualified, on_current)

    def exported(self, name: str, on_current: frozenset[str] = frozenset()) -> Summary | None:
        """The summary of a module-level function, or of a method of a module-level class
        (`Comm.send`), for other modules that import it."""
        owner = name.rpartition(".")[0]
        return self.summary(name, on_current) if "." not in owner and (not owner or owner in self.classes) else None

    def summary(self, name: str, on_current: frozenset[str] = frozenset()) -> Summary | None:
        """`on_current`: parameters the call passes the caller's current stream, known to be it
        in the function, so that a wait on one orders what the function made on it before."""
        key = (name, on_current)
        if key in self.summaries:
            return self.summaries[key]
        function = self.functions.get(name)
        if function is None or self.depth >= _MAX_SUMMARY_DEPTH:
            return None  # too deep: taken as doing nothing, and built again when reached from nearer
        self.summaries[key] = None  # a recursive call, while it is being summarised, does nothing
        self.depth += 1
        try:
            from csan_lint.lint.summarise import summarise  # it runs the interpreter, built on this module

            self.summaries[key] = summarise(self, name, function, on_current)
        finally:
            self.depth -= 1
        return self.summaries[key]


def _on_receiver(found: Callee, token: str) -> str | None:
    """`self.x` (or `cls.x`) of the called method in the caller's names."""
    if found.receiver in (None, "self"):
        return token if found.receiver else None
    return f"{found.receiver}.{token.split('.', 1)[1]}" if "." in token else found.receiver


_HANDED = event_token(f"{RETURNED}[")
"""The callee's token of an event it returns beside a tensor, in the marks of its summary."""


def renamed(mark: Mark, names: Mapping[str, str]) -> Mark:
    """`mark` with the events it is ordered before renamed: an event handed back beside a tensor
    (`return out, done`) is `event:<return>[1]` to the caller, and its own name for it there."""
    after = frozenset(names.get(token, token) for token in mark.after)
    return mark if after == mark.after else replace(mark, after=after)


class Effects:
    """The call half of `FunctionAnalysis`: replays a callee's summary at the call site."""

    anypath: AnyPath

    live: FlowState
    imports: ImportTable
    helpers: Helpers | None
    function: str | None
    statement: cst.CSTNode | None
    block: cst.With | None
    silent: int
    tokens: set[str]
    _stream: Callable[[cst.BaseExpression], str | None]
    _access: Callable[..., None]
    _forget: Callable[[str], None]
    _record: Callable[[str, str], None]
    maybe_tensors: set[str]

    def _for_streams_passed(self, found: Callee, call: cst.Call, qualified: str | None) -> Callee:
        """The callee as this call runs it: a parameter given the current stream is that stream
        there (`Helpers.summary`), so that `copy.wait_stream(compute)` orders what it made before."""
        summary = found.summary
        on_current = frozenset(
            param
            for param in summary.names
            if (value := _argument(summary, call, param)) is not None and self._stream(value) == self.live.current
        )
        if not on_current or self.helpers is None:
            return found
        return self.helpers.lookup(self.function, call.func, qualified, on_current) or found

    def _replay_orders(self, found: Callee, call: cst.Call) -> None:
        """The ordering a called function makes on every path that returns, in the caller's streams.
        All of it is applied at once, before the call's own reads (precision over recall)."""
        facts: dict[str, list[tuple[bool, frozenset[str]]]] = {}
        for token, after in found.summary.orders:
            mine = self._translate(found, call, token)
            if mine is None:
                continue
            mapped = frozenset(m for m in (self._translate(found, call, u) for u in after) if m is not None)
            facts.setdefault(mine, []).append((token in after, mapped))
        if facts:
            self.tokens.update(facts)
            self.live.update_marks(FactUpdate(facts))

    def _replay_effects(self, found: Callee, call: cst.Call) -> None:
        """The tensors the call leaves written or read, as accesses at the call on the streams it
        used. Those on another stream than the caller's are checked (the call's arguments were
        read on the caller's stream already); orderings it made are already applied."""
        effects = []
        for effect in found.summary.effects:
            key = self._argument_key(found, call, effect.key)
            stream = self._translate(found, call, effect.stream)
            if key is not None and stream is not None:
                after = frozenset(m for m in (self._translate(found, call, u) for u in effect.after) if m is not None)
                effects.append((effect, key, stream, after))
        passed = {id(arg.value) for arg in call.args}
        for _, key, stream, _ in effects:
            tensor = self.live.tensors.get(key)
            if stream != self.live.current and tensor is not None:  # the callee's access stands for that read
                self.live.tensors[key] = replace(
                    tensor, reads=frozenset(mark for mark in tensor.reads if id(mark.access.node) not in passed)
                )
        for effect, key, stream, after in effects:
            if effect.rebound:
                self.anypath.rebound_by_calls.add(key)
                assert self.statement is not None
                access = Access(call, stream, True, self.block or self.statement, self.function)
                mark = Mark(access, after | issued_on(stream), self.live.facts)
                self.live.tensors[key] = TrackedTensor(writes=frozenset({mark}))
                continue
            if stream != self.live.current or effect.key not in found.summary.names:
                # on another stream; or an object's tensor the call reaches itself, not through its arguments
                self._access(key, call, write=effect.write, stream=stream, after=after)
                continue
            if not effect.write:
                continue
            assert self.statement is not None
            access = Access(call, stream, True, self.block or self.statement, self.function)
            quiet = self.silent and effect.stream == CURRENT  # the unknown stream of the block around the call
            mark = Mark(access, frozenset({HOST}) if quiet else after | issued_on(stream), self.live.facts)
            tensor = self.live.tensors.get(key) or TrackedTensor()
            writes = (
                tensor.writes if tensor.writes and all(m.access.node is call for m in tensor.writes) else frozenset()
            )
            tensor = replace(tensor, writes=writes | {mark}, reads=frozenset())
            if tensor.alloc is not None and stream != tensor.alloc:
                tensor = replace(tensor, uses=tensor.uses | {mark})
            self.live.tensors[key] = tensor

        for effect in found.summary.returned:
            stream = self._translate(found, call, effect.stream)
            after = frozenset(m for m in (self._translate(found, call, u) for u in effect.after) if m is not None)
            if stream is not None and (stream != self.live.current or after - {stream}):
                assert self.statement is not None
                access = Access(call, stream, True, self.block or self.statement, self.function)
                position = returned_position(effect.key)  # one write per position: the first in order
                self.anypath.returned_by.setdefault(id(call), {}).setdefault(
                    position, Mark(access, after | issued_on(stream))
                )

    def _returns_fresh(self, call: cst.Call) -> bool:
        """The called function returns memory it allocates on the stream current at the call,
        on a path the arguments allow: each parameter that path found `None` is passed as
        `None`, as a name bound to `None` here, or left to its default."""
        found = (
            self.helpers.lookup(self.function, call.func, self.imports.qualified(call.func)) if self.helpers else None
        )
        if found is None:
            return False

        def may_be_none(param: str) -> bool:
            value = _argument(found.summary, call, param)
            return value is None or (isinstance(value, cst.Name) and value.value in ("None", *self.anypath.maybe_none))

        return any(all(map(may_be_none, params)) for params in found.summary.allocates)

    def _argument_key(self, found: Callee, call: cst.Call, key: str) -> str | None:
        """The caller's name for a parameter or `self.x` of the called function."""
        if key.startswith("self."):
            return _on_receiver(found, key)
        value = _argument(found.summary, call, key)
        return dotted_name(value) if value is not None else None

    def _translate(self, found: Callee, call: cst.Call, token: str) -> str | None:
        """A token of the called function in the caller's terms; None where it has no meaning here."""
        if token in (HOST, ANY_OTHER):
            return token
        if token == CURRENT:
            return self.live.current
        if (name := event_name(token)) is not None:
            stream = self._translate(found, call, name)
            return None if stream is None else event_token(stream)
        first = root(token)
        if first in found.summary.names:
            value = _argument(found.summary, call, first)
            if value is None:
                return None
            if first == token:
                return self._stream(value)
            holder = dotted_name(value)  # `state.stream` of the argument `s`: `s.stream`
            return rebased(token, holder) if holder is not None else None
        if first in ("self", "cls"):
            return _on_receiver(found, token)
        return token if found.same_module else None

    def _unbind_host_items(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`loss, n = step(x)` of the module's `def step(...) -> tuple[Tensor, int]`: `n` is a
        number, as its annotation says, no tensor."""
        if not (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, cst.Call)) or self.helpers is None:
            return
        if any(isinstance(element, cst.StarredElement) for element in target.elements):
            return
        callee = self.helpers.callee(self.function, value.func)
        positions = host_positions(self.helpers.functions[callee] if callee is not None else None)
        for index, element in enumerate(target.elements):
            if index in positions and isinstance(element.value, cst.Name):
                self.live.tensors.pop(element.value.value, None)
                self.maybe_tensors.discard(element.value.value)

    def _bind_returned(self, target: cst.BaseExpression, returned: dict[int | None, Mark]) -> None:
        """`x = f()`, `a, b = f()`: each name starts from the write, on the callee's stream, of
        the value it gets (by position in a returned tuple, else the whole value's); `pair = f()`
        of a tuple: `pair[i]` does, item by item. An event returned beside them is no tensor,
        and they are ordered before it under the caller's name for it (`b`, `pair[1]`)."""
        elements = [element.value for element in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
        named = list(enumerate(elements)) if elements else [(None, target)]
        handed: dict[str, str] = {}  # the callee's token for an event it returned -> the caller's
        for token in {token for mark in returned.values() for token in mark.after}:
            position = returned_position(event_name(token) or "") if token.startswith(_HANDED) else None
            if position is not None and isinstance(target, cst.Name):
                handed[token] = event_token(f"{target.value}[{position}]")
            elif position is not None and position < len(elements) and (name := dotted_name(elements[position])):
                handed[token] = event_token(name)
        for index, element in named:
            mark = returned.get(index) or returned.get(None)
            if isinstance(element, cst.Name) and event_token(returned_key(index)) in handed:
                self.live.tensors.pop(element.value, None)  # the event, no tensor
            elif isinstance(element, cst.Name) and mark is not None:
                self.live.tensors[element.value] = TrackedTensor(writes=frozenset({renamed(mark, handed)}), unsure=True)
        if isinstance(target, cst.Name) and None not in returned:
            for index, mark in returned.items():
                item = TrackedTensor(writes=frozenset({renamed(mark, handed)}), unsure=True)
                self.live.tensors[f"{target.value}[{index}]"] = item
