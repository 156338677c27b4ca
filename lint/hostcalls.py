"""Host calls: what a call does on the host side — a sync, a download or an upload started
(a copy of a direction the code does not say kept apart until a use places it),
a pending buffer read where a callee reads it (same-module functions run with it pending;
unseen ones under `unseen-callees-read-downloads`), a copy into a host buffer.

Part of hostflow's `_Analysis` (lint/hostflow.py), beside its ordering part (lint/hostorder.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.api import Kind, Receiver
from csan_lint.lint.devices import Place, default_device, place_of_result
from csan_lint.lint.hostfacts import (
    ModuleFacts,
    is_true,
    non_blocking,
    parameter_given,
    untold_flag,
    viewed_buffer,
    written_buffer,
)
from csan_lint.lint.hoststate import Copy, HostState, Pending
from csan_lint.lint.names import DEVICE_SYNC, SET_STREAM, ImportTable, dotted_name
from csan_lint.lint.values import code_of, is_barrier
from csan_lint.lint.views import returned_receiver
from csan_lint.lint.vocabulary import (
    BUILTINS,
    DATA_BUILTINS,
    HOST_ONLY_METHODS,
    METADATA,
    OUT_KEYWORD,
    STORING_METHODS,
    SYNC_BUILTINS,
    SYNC_METHODS,
    UPLOAD_METHODS,
)
from csan_lint.runtime import kinds

LOOKS_ONLY = METADATA | api.methods(Receiver.TENSOR, kinds=(Kind.RECORD_STREAM,))
"""Attributes and methods that look at a buffer without reading its data."""


class HostCalls:
    """The call half of hostflow's `_Analysis`."""

    imports: ImportTable
    facts: ModuleFacts
    state: HostState | None
    live: HostState
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _context_stream: Callable[[cst.BaseExpression], str | None]
    _eval: Callable[[cst.CSTNode], None]
    _known: Callable[[str], Place | None]
    _hand_off: Callable[[cst.BaseExpression], None]
    _hazard: Callable[..., None]
    _host_read: Callable[..., None]
    _host_sync: Callable[[str | None], None]
    _host_write: Callable[[cst.BaseExpression, cst.CSTNode], None]
    _may_be_on_device: Callable[[cst.BaseExpression], bool]
    _ordering: Callable[[cst.Call, cst.Attribute], bool]
    _pending_write_check: Callable[..., None]
    _stream: Callable[[cst.BaseExpression | None], str | None]
    _callee_reads: Callable[[cst.FunctionDef, str], frozenset[str] | None]
    _run_for_return: Callable[[cst.FunctionDef], bool]
    function: cst.FunctionDef | None
    observed_download: str | None
    observed_pinned: Mapping[str, str]
    pending: str | None
    next_call: bool

    def _call(self, node: cst.Call) -> None:
        func = node.func
        qualified = self.imports.qualified(func)
        if qualified == DEVICE_SYNC:
            self._host_sync(None)
            return
        if is_barrier(qualified, node):
            self._eval_args(node, reads=True)
            self._host_sync(self.live.current)
            return
        if qualified == SET_STREAM and node.args:
            self.live.current = self._stream(node.args[0].value) or self.live.current
            return
        if qualified is not None:
            self._eval_args(node, reads=True)
            self._write_out(node)
            return
        if isinstance(func, cst.Name):
            builtin = func.value
            reading = builtin in DATA_BUILTINS and builtin not in self.facts.functions
            if reading or builtin in self.facts.classes or builtin in BUILTINS:
                self._eval_args(node, reads=reading)
            else:
                self._give(node, self.facts.functions.get(builtin), bound=False)
            if self.facts.syncs(builtin):
                self._host_sync(None)
            elif reading and builtin in SYNC_BUILTINS and any(self._may_be_on_device(a.value) for a in node.args):
                self._host_sync(self.live.current)
            return
        if not isinstance(func, cst.Attribute):
            self._eval(func)
            self._give(node, None, bound=False)
            return
        if self._ordering(node, func):
            return
        method, receiver = func.attr.value, func.value
        key = dotted_name(receiver)
        if method == "enter_context" and node.args and (stream := self._context_stream(node.args[0].value)):
            self.live.current = stream  # until the ExitStack's `with` ends
            return
        if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
            self._give(node, self.facts.functions.get(method, ()), bound=True)
            if self.facts.syncs(method):
                self._host_sync(None)
            return
        if method in STORING_METHODS:
            self._eval(receiver)
            for arg in node.args:
                self._hand_off(arg.value)
            return
        if method in UPLOAD_METHODS and key in self.live.into and self._to_host(node):
            self._host_read(key, receiver)  # `host.to(torch.float32)`: the host converts it now
        if method in LOOKS_ONLY or (method in UPLOAD_METHODS and key is not None):
            self._eval_args(node, reads=False)
            uploads = method in UPLOAD_METHODS and key in self.live.pinned
            if uploads and key is not None and self._non_blocking(node) and not self._to_host(node):
                self._upload(key, node)
            return
        if api.method_op(method)[0] == api.COPY_INTO and node.args:
            self._copy_into(receiver, node)
            return
        if method in HOST_ONLY_METHODS and key is not None:
            self._host_only(key)
        if self._downloads(receiver) or (method in HOST_ONLY_METHODS and self._copies_unplaced(receiver)):
            # `x.to("cpu", non_blocking=True).tolist()`, `x.to(d, non_blocking=True).pin_memory()`: read at once
            self._read_at_once(receiver, node)
            self._eval_args(node, reads=True)
            return
        pending = key is not None and (key in self.live.into or key in self.live.out_of)
        self._eval(receiver)
        if pending or key in self.live.pinned:
            self._eval_args(node, reads=True)
        else:
            self._give(node, None, bound=False)
        if method.endswith("_") and not method.startswith("_"):
            self._host_write(receiver, node)
        elif (method in SYNC_METHODS and not pending) or (
            api.method_op(method)[0] == api.COPY_EITHER and not self._non_blocking(node) and self._to_host(node)
        ):
            self._host_sync(self.live.current)
        self._write_out(node)

    def _non_blocking(self, call: cst.Call) -> bool:
        """The copy does not block the host: its flag is `True`, or one the code does not tell
        where a run saw this function download without blocking, or under
        UNTOLD_NON_BLOCKING_FLAGS (`_copies_rest_on`)."""
        if non_blocking(call, self.live.true):
            return True
        settled = self.observed_download is not None or self.facts.assumptions.holds(assumed.UNTOLD_NON_BLOCKING_FLAGS)
        return settled and untold_flag(call, self.live.true)

    def _copies_rest_on(self, copies: frozenset[Copy]) -> tuple[frozenset[str], frozenset[str]]:
        """What taking these copies as non-blocking downloads rests on: (the assumption that a
        flag the code does not tell may be `True`, the runs' observations: that settled flag, a
        destination a run saw handed in pinned)."""
        calls = [copy.node for copy in copies if isinstance(copy.node, cst.Call)]
        observed = {
            seen
            for call in calls
            if isinstance(call.func, cst.Attribute)
            and (seen := self.observed_pinned.get(written_buffer(call.func.value) or "")) is not None
        }
        if not any(untold_flag(call, self.live.true) for call in calls):
            return frozenset(), frozenset(observed)
        if self.observed_download is not None:
            return frozenset(), frozenset({*observed, self.observed_download})
        return frozenset({assumed.UNTOLD_NON_BLOCKING_FLAGS}), frozenset(observed)

    def _eval_args(self, node: cst.Call, *, reads: bool) -> None:
        """`reads`: the callee reads its arguments' data on the host (a torch op, `print`...);
        otherwise a buffer passed as is is handed off to unknown code."""
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == OUT_KEYWORD:
                continue
            if reads and self._downloads(arg.value):  # `torch.add(x.to("cpu", non_blocking=True), y)`
                self._read_at_once(arg.value, node)
            elif reads:
                self._eval(arg.value)
            else:
                self._hand_off(arg.value)

    def _stored(self, value: cst.BaseExpression, node: cst.CSTNode) -> None:
        """A value written into memory that exists (`t[i] = v`, `t -= v`): its data is read now,
        and the result of a non-blocking download (`x.to("cpu", non_blocking=True)`) on the host."""
        if self._downloads(value):
            self._read_at_once(value, node)
        else:
            self._eval(value)

    def _give(self, node: cst.Call, callees: Sequence[cst.FunctionDef] | None, *, bound: bool) -> None:
        """Arguments given to a function of the module (`callees`: every definition of the name)
        or to one the analysis cannot see (None): host memory a download may still be writing is
        read where a callee's body reads that parameter on the host, or, unseen, under
        UNSEEN_CALLEES_READ_DOWNLOADS; anything else is handed off."""
        unseen = callees is None and self.facts.assumptions.holds(assumed.UNSEEN_CALLEES_READ_DOWNLOADS)
        for position, arg in enumerate(node.args):
            key, downloading = dotted_name(arg.value), self._downloads(arg.value)
            rests_on: frozenset[str] | None = None
            if (key is not None and key in self.live.into) or downloading:
                if callees is None:
                    rests_on = frozenset({assumed.UNSEEN_CALLEES_READ_DOWNLOADS}) if unseen else None
                else:
                    parameter = parameter_given(callees, position, arg, bound=bound)
                    rests_on = self.facts.reads_on_host(callees, parameter, self._callee_reads)
            if rests_on is None:
                self._hand_off(arg.value)
            elif downloading:
                self._read_at_once(arg.value, node, rests_on)
            elif key is not None:
                self._host_read(key, arg.value, rests_on)

    def _read_at_once(
        self, download: cst.BaseExpression, node: cst.CSTNode, rests_on: frozenset[str] = frozenset()
    ) -> None:
        """The result of a non-blocking download, never named, read by `node` on the host."""
        self._eval(download)
        copy = Copy(download, self.live.current)
        self._hazard(
            kinds.HOST_READ_PENDING, node, buffer=code_of(download), copies=frozenset({copy}), rests_on=rests_on
        )

    def _write_out(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == OUT_KEYWORD:
                self._host_write(arg.value, node)

    def _copy_into(self, receiver: cst.BaseExpression, node: cst.Call) -> None:
        """`dst.copy_(src[, non_blocking])`: a download into a pinned `dst`, an upload from a
        pinned `src`, or (blocking, into a host buffer) a host write."""
        state = self.live
        source = node.args[0].value
        dst, src = written_buffer(receiver), viewed_buffer(source)
        asynchronous = self._non_blocking(node) or (
            len(node.args) > 1 and node.args[1].keyword is None and is_true(node.args[1].value)
        )
        if src is not None and src in state.pinned and asynchronous:
            self._upload(src, node)
        elif src is not None:
            self._host_read(src, source)
        else:
            self._stored(source, node)
        if dst is None:
            self._eval(receiver)
        elif asynchronous and dst in state.pinned:
            self._pending_write_check(dst, node, on=state.current)
            state.into[dst] = frozenset({Pending(Copy(node, state.current), frozenset({state.current}))})
        elif not asynchronous:
            self._host_write(receiver, node)

    def _upload(self, key: str, node: cst.Call) -> None:
        state = self.live
        copy = Pending(Copy(node, state.current), frozenset({state.current}))
        for buffer in {key, state.views.get(key, key)}:
            state.out_of[buffer] = state.out_of.get(buffer, frozenset()) | {copy}

    def _to_host(self, call: cst.Call) -> bool:
        """`x.to(d, ...)` where `d` may be the host: `"cpu"`, `torch.device("cpu")`, `y.device`
        of host memory `y`, `x.to(y)` of a host tensor `y`, `.cpu()`."""
        return (
            place_of_result(call, self.imports, self._known, default_device(self.facts.assumptions.holds)) is Place.HOST
        )

    def _downloads(self, expr: cst.BaseExpression) -> bool:
        """A non-blocking copy to the host (`x.to("cpu", non_blocking=True)`): its result,
        pinned memory, may not be there yet."""
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and api.method_op(expr.func.attr.value)[0] == api.COPY_EITHER
            and self._non_blocking(expr)
            and self._to_host(expr)
        )

    def _copies_unplaced(self, expr: cst.BaseExpression) -> bool:
        """A non-blocking copy to a place the code does not say (`x.to(dev, non_blocking=True)`)."""
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and api.method_op(expr.func.attr.value)[0] == api.COPY_EITHER
            and self._non_blocking(expr)
            and place_of_result(expr, self.imports, self._known, default_device(self.facts.assumptions.holds)) is None
        )

    def _host_only(self, key: str) -> None:
        """A method only host tensors have was called on `key`: it is host memory, and the
        copies into it of a place the code did not say were downloads."""
        self.live.on_host |= {key}
        if (copies := self.live.unplaced.pop(key, None)) is not None:
            self.live.into[key] = self.live.into.get(key, frozenset()) | copies

    def _returned_to_unseen_callers(self, node: cst.Return) -> None:
        """A pending download returned by a function no code of the module calls: read by its
        callers, under UNSEEN_CALLERS_READ_RETURNED_DOWNLOADS."""
        function = self.function
        if function is None or self.next_call or self.pending is not None:
            return
        if not self.facts.assumptions.holds(assumed.UNSEEN_CALLERS_READ_RETURNED_DOWNLOADS):
            return
        if self.facts.called(function):
            return
        value = node.value
        if value is None:
            return
        named = dotted_name(value)
        copies = self.live.into.get(named or "", frozenset())
        found = frozenset(p.copy for p in copies) or frozenset({Copy(value, self.live.current)})
        rests = frozenset({assumed.UNSEEN_CALLERS_READ_RETURNED_DOWNLOADS})
        buffer = named or code_of(value)
        self._hazard(kinds.HOST_READ_PENDING, node, buffer=buffer, copies=found, rests_on=rests, returned="yes")

    def _pending_result(self, expr: cst.BaseExpression) -> bool:
        """`expr` is host memory a non-blocking copy may still be writing: a download, a name
        holding one, the result of a function returning one."""
        expr = returned_receiver(expr)
        if isinstance(expr, cst.Call):
            return self._downloads(expr) or self._returns_download(expr)
        return dotted_name(expr) in self.live.into

    def _returns_download(self, call: cst.Call) -> bool:
        """`y = f(x)`, `y = self.f(x)` of a function of the module that returns a pending download."""
        callees, _ = self.facts.callees(call)
        return bool(callees) and self.facts.returns_download(callees, self._run_for_return)
