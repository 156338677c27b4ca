"""Calls: what a call reads, writes, orders and hands over. Torch's functions, the methods of
streams, events, tensors and containers, builtins, and calls of the module's own functions,
followed through their summaries (lint/effects.py).

Part of `FunctionAnalysis` (lint/accesses.py); the methods it calls that are not here live in
the other parts (bindings, values, streams, effects).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.tokens import HOST, alternatives, event_name, is_choice, rebased, root
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import Caller, CallSite, both
from csan_lint.lint.effects import Callee, Helpers, probe_key
from csan_lint.lint.kept import keep_item
from csan_lint.lint.names import DEVICE_SYNC, SET_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import parameters
from csan_lint.lint.ordering import Access, FlowState, MarkUpdate
from csan_lint.lint.recognize import PARTIAL
from csan_lint.lint.values import Value, freed_storage, is_barrier, is_constructor, is_inplace
from csan_lint.lint.vocabulary import (
    AUTOGRAD_BOOKKEEPING,
    COLLECTIVES,
    CONTAINER_METHODS,
    HOST_METHODS,
    METADATA_BUILTINS,
    OUT_KEYWORD,
    PURE_BUILTINS,
    SHAPED_LIKE,
    STORING_METHODS,
    SYNC_BUILTINS,
    SYNC_METHODS,
    TENSOR_METHODS,
    VIEW_METHODS,
)

GRADIENTS = "gradients of a backward pass"
"""The state key of the last backward pass's write of every `.grad`: no name in source spells
it, and a finding about it (a graph's replay writing them again) names it so."""


class Calls:
    """The call half of `FunctionAnalysis`."""

    imports: ImportTable
    function: str | None
    helpers: Helpers | None
    state: FlowState | None
    live: FlowState
    graphs: dict[str, tuple[set[str], set[str]]]
    entry_stream: str
    orders_at_calls: dict[str, dict[cst.Call, CallSite]] | None
    caller: Caller
    anypath: AnyPath
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _eval: Callable[[cst.CSTNode], None]
    _access: Callable[..., None]
    _make_access: Callable[..., Access]
    _eval_value: Callable[[cst.BaseExpression], None]
    _escape_names: Callable[[cst.CSTNode], None]
    _value: Callable[[cst.BaseExpression], Value]
    _tensor_names: Callable[[cst.CSTNode], Iterator[str]]
    _is_tensor: Callable[..., bool]
    _tensor_operand: Callable[..., bool]
    _stream: Callable[[cst.BaseExpression], str | None]
    _context_stream: Callable[[cst.BaseExpression], str | None]
    _stream_method: Callable[[cst.Call, cst.Attribute], bool]
    _made_current: Callable[[str], None]
    _order: Callable[[MarkUpdate], None]
    _record_stream: Callable[[cst.Call, cst.BaseExpression, cst.BaseExpression], None]
    _replay: Callable[[tuple[AbstractSet[str], AbstractSet[str]], cst.Call], None]
    _captured_in_class: Callable[[str], tuple[frozenset[str], frozenset[str]] | None]
    _free: Callable[[str, cst.Call], None]
    _bind: Callable[[cst.BaseExpression, Value], None]
    _demote: Callable[..., None]
    _write_target: Callable[..., None]
    _for_streams_passed: Callable[[Callee, cst.Call, str | None], Callee]
    _replay_orders: Callable[[Callee, cst.Call], None]
    _replay_effects: Callable[[Callee, cst.Call], None]
    _moved: Callable[[cst.BaseExpression], bool]
    _read_moved: Callable[[cst.Call], None]
    _assumes: Callable[[str], bool]

    def _call(self, node: cst.Call) -> None:
        func = node.func
        called = dotted_name(func) or ""
        if api.records_stream(called) and len(node.args) == 2:  # `_no_dispatch_record_stream(t, s)`
            self._record_stream(node, node.args[0].value, node.args[1].value)
            return
        qualified = self.imports.qualified(func)
        if qualified == PARTIAL:
            self._hand_over(node)  # kept for a later call, on a stream not known here
            return
        if is_barrier(qualified, node):
            self._eval_args(node)
            self._order(MarkUpdate(self.live.current, HOST))
            return
        if qualified is not None and qualified.startswith("torch."):
            in_place = (
                (qualified.endswith("_") or qualified in COLLECTIVES)
                and bool(node.args)
                and node.args[0].keyword is None
            )
            self._eval_args(node, skip_first=in_place or qualified in SHAPED_LIKE)
            if qualified == DEVICE_SYNC:
                self._order(MarkUpdate(None, HOST))
            elif qualified == SET_STREAM and node.args:
                stream = self._stream(node.args[0].value)
                if stream is not None:
                    self.live.current = stream
                    self._made_current(stream)
            elif in_place:
                self._write_target(node.args[0].value)
            elif (op := api.operation(qualified)) is not None and op.kind is Kind.BACKWARD:
                self._gradients_written(node)
            self._write_out(node)
            return
        self._note_orders_at_call(node)
        found = self.helpers.lookup(self.function, func, qualified) if self.helpers is not None else None
        if found is not None:
            found = self._for_streams_passed(found, node, qualified)
            self._replay_orders(found, node)
        asked = self.helpers.metadata_args(self.function, node) if self.helpers is not None else frozenset()
        self._call_other(node, asked)
        self._launch_on_handle(node)
        if found is not None and self.state is not None:
            self._replay_effects(found, node)

    def _note_orders_at_call(self, call: cst.Call) -> None:
        """For a call of the module's own function, notes what its caller shows at the call
        (`CallSite`): the streams ordered after this function's entry stream on every path here,
        as the callee names them (`self.s` through `self.m(...)`, a module global, the parameter
        a stream is passed as), and the parameters given values this function holds no write
        of. Its entry, when every call is seen (lint/streamflow.py)."""
        if self.orders_at_calls is None or self.helpers is None or self.state is None:
            return
        callee = self.helpers.callee(self.function, call.func)
        if callee is None:
            return
        probe = self.live.tensors.get(probe_key(self.entry_stream))
        after = (
            frozenset.intersection(*(mark.after for mark in probe.writes)) if probe and probe.writes else frozenset()
        )
        func = call.func
        on_self = isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"
        shared = self.helpers.globals | ({"self", "cls"} if on_self else set())
        bound = (
            "." in callee and isinstance(func, cst.Attribute) and dotted_name(func.value) not in self.helpers.classes
        )
        given = self._arguments(call, self.helpers.functions[callee], skip_first=bound)
        passed = {token: param for param, value in given.items() if (token := self._stream(value)) is not None}
        closure = self.function is not None and callee.startswith(f"{self.function}.")  # sees this scope's names
        named_alike = {
            token
            for token in after
            if token == HOST or closure or all(root(part) in shared for part in alternatives(token))
        }
        held = {value.value: param for param, value in given.items() if isinstance(value, cst.Name)}
        through = {  # `s.stream` of an argument `s` the callee calls `state`: its `state.stream`
            rebased(token, held[root(token)])
            for token in after
            if not is_choice(token) and root(token) in held and root(token) != (event_name(token) or token)
        }
        ordered = frozenset(named_alike | through | {passed[token] for token in after if token in passed})
        unwritten = frozenset(param for param, value in given.items() if not self._holds_write(value))
        contexts = frozenset(  # a stream other than the one current at the call
            param for param, value in given.items() if self._context_stream(value) not in (None, self.live.current)
        )
        on_entry = frozenset(param for param, value in given.items() if self._written_here(value))
        site = CallSite(ordered, unwritten, contexts, on_entry)
        sites = self.orders_at_calls.setdefault(callee, {})
        sites[call] = both(sites[call], site) if call in sites else site  # a loop's call, visited again

    def _written_here(self, value: cst.BaseExpression) -> bool:
        """Whether every write this function tracks of what `value` names was made on the stream
        current now (a tensor made inside the block the call is in)."""
        writes = [mark for key in self._tensor_names(value) for mark in self.live.tensors[key].writes]
        return bool(writes) and all(mark.access.stream == self.live.current for mark in writes)

    def _holds_write(self, value: cst.BaseExpression) -> bool:
        """Whether this function tracks a write of what `value` names (its own tensor, or a
        parameter taken as written by its caller), or passes on one of its own parameters: what
        its caller wrote is the callee's caller's too, whatever this function assumes of it."""
        name = dotted_name(value.value if isinstance(value, cst.Subscript) else value) or ""
        if name.partition(".")[0] in self.caller.streams - {"self", "cls"}:
            return True
        return any(self.live.tensors[key].writes for key in self._tensor_names(value))

    @staticmethod
    def _arguments(call: cst.Call, callee: cst.FunctionDef, *, skip_first: bool) -> dict[str, cst.BaseExpression]:
        """The callee's parameter -> the expression the call gives it (up to a starred one)."""
        params = [param.name.value for param in parameters(callee)][1 if skip_first else 0 :]
        given = {}
        for index, arg in enumerate(call.args):
            if arg.star:
                break
            name = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
            if name is not None:
                given[name] = arg.value
        return given

    def _call_other(self, node: cst.Call, asked: frozenset[int] = frozenset()) -> None:
        """A call into code other than torch's: stream and tensor methods, builtins, the rest.
        `asked`: the ids of arguments the callee only asks for metadata (not read)."""
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in AUTOGRAD_BOOKKEEPING:
            for arg in node.args:  # the tensors are kept, not read; a kernel computing one still runs
                if isinstance(arg.value, cst.Call):
                    self._eval(arg.value)
            return
        if isinstance(func, cst.Attribute):
            if self._stream_method(node, func):
                return
            method, receiver = func.attr.value, func.value
            if self._moved(func):  # `self.shard(x)`: a moved module of `self` run, its forward reads it
                self._eval(func)
            if method == "enter_context" and node.args and (entered := self._context_stream(node.args[0].value)):
                self.live.current = entered  # until the ExitStack's `with` ends
                return
            key = dotted_name(receiver)
            op = api.method_op(method)[0]
            if op is not None and op.kind is Kind.BACKWARD:  # `loss.backward()`, `scaler.scale(loss).backward()`
                self._eval(receiver)
                self._eval_args(node)
                self._gradients_written(node)
                return
            if op == api.ADDRESS:  # `x.data_ptr()`: no kernel, the memory handed out
                self._eval_value(receiver)
                if (addressed := _addressed(receiver)) is not None:
                    self.anypath.addressed.add(addressed)
                return
            if op == api.RECORD_STREAM:  # allocator bookkeeping on the host: no kernel reads the tensor
                if node.args:
                    self._record_stream(node, receiver, node.args[0].value)
                return
            if method in HOST_METHODS or self._moved(receiver):  # a module's own: flags, or its parameters
                self._eval_args(node)
                return
            if op is not None and op.kind is Kind.REPLAY and not node.args and key is not None:
                captured = self.graphs.get(key) or self._captured_in_class(key)
                if captured is not None:
                    self._replay(captured, node)
                    return
            if (freed := freed_storage(node)) is not None:
                self._free(freed, node)
                return
            if method == "set_" and key is not None:
                self._bind(receiver, self._value(node.args[0].value) if node.args else Value("other"))
                return  # the tensor now uses another storage: no data is written
            if method in CONTAINER_METHODS and key is not None:
                self._demote(key, proven=method != "values")  # a sparse tensor has `.values()` too
            stores = method in STORING_METHODS and not (method in TENSOR_METHODS and self._is_tensor(receiver))
            if method == "append" and key is not None and len(node.args) == 1:
                keep_item(self.live.tensors, key, node.args[0].value)
            if is_constructor(method):
                self._read_moved(node)
            if is_constructor(method) or stores:
                self._hand_over(node)  # stored, not computed on
                return
            if method in SYNC_METHODS:
                self._eval(receiver)
                self._eval_args(node)
                self._order(MarkUpdate(self.live.current, HOST))
                return
            if is_inplace(method):
                self._eval_args(node)
                self._write_target(receiver)
                self._write_out(node)
                return
            self._eval(receiver)
            self._eval_args(node, asked=asked)
            if method in STORING_METHODS or (not self._is_tensor(receiver) and self._unseen_code_keeps()):
                self._escape_args(node)
        else:
            if isinstance(func, cst.Name) and is_constructor(func.value):
                self._read_moved(node)
                self._hand_over(node)
                return
            if not isinstance(func, cst.Name) or self._moved(func):
                self._eval(func)  # a called name is a function or a module: read if moved here
            builtin = func.value if isinstance(func, cst.Name) else None
            if builtin not in METADATA_BUILTINS:
                self._eval_args(node, asked=asked)
            if builtin in SYNC_BUILTINS and any(self._tensor_operand(arg.value) for arg in node.args):
                self._order(MarkUpdate(self.live.current, HOST))
            if builtin not in PURE_BUILTINS and self._unseen_code_keeps():
                self._escape_args(node)
        self._write_out(node)

    def _launch_on_handle(self, node: cst.Call) -> None:
        """A call given a stream's raw handle (`context.execute_async_v3(s.cuda_stream)`) runs
        code the analysis cannot read on that stream, which may read and write every tensor whose
        address was handed out (`_addressed`)."""
        handles = [
            arg.value.value
            for arg in node.args
            if isinstance(arg.value, cst.Attribute) and arg.value.attr.value == api.STREAM_HANDLE
        ]
        stream = self._stream(handles[0]) if handles else None
        if stream is None or self.state is None:
            return
        for key in sorted(self.anypath.addressed):
            self._access(key, node, write=False, stream=stream)
            self._access(key, node, write=True, stream=stream, checked=False)

    def _unseen_code_keeps(self) -> bool:
        """Whether unknown code keeps the arguments it is given (`unseen-callees-keep-arguments`)."""
        return self._assumes(assumed.UNSEEN_CALLEES_KEEP_ARGUMENTS)

    def _gradients_written(self, node: cst.Call) -> None:
        """Autograd writes every leaf's `.grad` on the current stream: those followed here are
        written now, and one first used later is this write's (`FunctionAnalysis._access`)."""
        for key in [GRADIENTS, *(key for key in self.live.tensors if key.endswith(".grad"))]:
            self._access(key, node, write=True)

    def _hand_over(self, node: cst.Call) -> None:
        """Arguments stored by the call (a container, an object being built): their computation
        is evaluated, naming them reads nothing, and their lifetime is no longer ours."""
        for arg in node.args:
            self._eval_value(arg.value)
        self._escape_args(node)

    def _eval_args(self, node: cst.Call, *, skip_first: bool = False, asked: frozenset[int] = frozenset()) -> None:
        """Reads of the arguments, except the first where the call writes it in place (checked as
        a write) or only looks at its shape (`torch.zeros_like(x)`), and the tensors named where
        the callee only asks for metadata (`asked`: ids of those arguments)."""
        for index, arg in enumerate(node.args):
            if id(arg.value) in asked:
                self._eval_value(arg.value)
            elif (arg.keyword is None or arg.keyword.value != "out") and not (skip_first and index == 0):
                self._eval(arg.value)

    def _escape_args(self, node: cst.Call) -> None:
        """Unknown code may keep its arguments alive: their lifetime is no longer ours."""
        for arg in node.args:
            self._escape_names(arg.value)

    def _write_out(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == OUT_KEYWORD:
                self._write_target(arg.value)


def _addressed(expr: cst.BaseExpression) -> str | None:
    """The tensor whose memory `expr.data_ptr()` hands out: `x` of `x`, `x[i:]`, a view of it,
    `x.contiguous()` (a copy where it must be, made from `x`)."""
    while True:
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif (
            isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in VIEW_METHODS
        ):
            expr = expr.func.value
        else:
            return dotted_name(expr)
