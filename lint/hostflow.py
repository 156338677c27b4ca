"""Host-side ordering: a second, lighter abstract interpreter for what the host does around the
streams — pending non-blocking copies (CSL301, CSL302), events waited before any record
(CSL401) and CUDA graph capture (CSL501, CSL502).

streamflow.py follows tensors between streams; the hazards here are about the host and about
objects (copies, events, captures), so they get their own small state:
- the current stream, as in streamflow (`<current>` outside any stream block);
- per host buffer (a dotted name), the non-blocking copies still pending into it (device to
  host) or out of it (host to device), each with the ordering tokens whose host sync covers it:
  its stream, streams that waited for it, `event:e` for events recorded after it;
- events made in the function and not yet recorded on every path;
- the graph capture running, if any: its stream, the side streams forked from it, the side
  stream blocks entered during it and whether each was forked and joined.

Branches join by union of what is pending and intersection of what orders it; loops run to a
fixpoint, so a copy at the end of one iteration meets the overwrite at the start of the next.
Precision over recall: a buffer counts as pinned only when this module pins it, passing a buffer
to a function of unknown effect hands it off (no read, no longer tracked), and a call to a
same-module function that synchronizes anywhere in its body orders the host after everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import libcst as cst

from csan_lint.lint.interpret import Interpreter, Loop
from csan_lint.lint.model import Span
from csan_lint.lint.names import (
    CURRENT_STREAM,
    DEFAULT_STREAM,
    DEVICE_SYNC,
    EVENT_CONSTRUCTORS,
    GRAPH_CAPTURE,
    SET_STREAM,
    STREAM_CONTEXTS,
    ImportTable,
    dotted_name,
)
from csan_lint.lint.nodes import children
from csan_lint.lint.streamflow import CURRENT, Location, ModuleFlow
from csan_lint.runtime import kinds

UNKNOWN = "?"
"""The current stream differs between paths, or was set by code not followed."""
CAPTURE = "<capture>"
"""The side stream `torch.cuda.graph` captures on when given none."""
_MAX_LOOP_PASSES = 6

_METADATA = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "element_size", "stride",
        "storage_offset", "data_ptr", "is_contiguous", "get_device", "is_pinned", "shape",
        "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "nbytes", "itemsize",
        "untyped_storage", "record_stream",
    }
)  # fmt: skip
"""Attributes and methods that look at a buffer without reading its data."""
_DEVICE_BOUND = frozenset({"to", "cuda"})
"""A host buffer's `.to(device)` / `.cuda()` is a copy in stream order, not a host read."""
_HOST_SYNC_METHODS = frozenset({"item", "cpu", "tolist"})
"""On a device tensor these wait for the current stream."""
_READING_BUILTINS = frozenset(
    {
        "print", "int", "float", "bool", "str", "repr", "format", "list", "tuple", "sum", "max",
        "min", "sorted", "abs", "round", "iter", "next", "enumerate", "zip", "map", "any", "all",
        "set", "dict", "bytes", "complex",
    }
)  # fmt: skip
_SYNCING_BUILTINS = frozenset({"int", "float", "bool"})
"""Converting a device tensor to a Python number waits for the current stream."""
_STORING_METHODS = frozenset(
    {"append", "extend", "insert", "appendleft", "put", "put_nowait", "setdefault", "update", "add", "push"}
)


@dataclass(frozen=True)
class HostHazard:
    """One host-side finding: `kind` is the runtime error kind that would confirm it."""

    kind: str
    node: cst.CSTNode
    """Where the finding points: the host access, the wait, `capture_begin`, the side block's item."""
    span_node: cst.CSTNode
    fields: tuple[tuple[str, str], ...]
    """Raw message fields: names as written, streams as tokens (`<current>`); `fields()` words them."""
    copy: cst.CSTNode | None = None
    """The pending copy a host access races with."""


@dataclass(frozen=True)
class _Copy:
    node: cst.CSTNode
    stream: str


@dataclass(frozen=True)
class _Pending:
    copy: _Copy
    after: frozenset[str]
    """Tokens whose host sync orders the host after the copy: streams and `event:e`."""


@dataclass(frozen=True)
class _Block:
    """A side stream block entered during a capture."""

    item: cst.CSTNode
    node: cst.With
    stream: str
    forked: bool


@dataclass(frozen=True)
class _Capture:
    stream: str
    forked: frozenset[str] = frozenset()
    """Side streams ordered after the capture stream since the capture began."""
    blocks: frozenset[_Block] = frozenset()
    joined: frozenset[_Block] = frozenset()
    events: frozenset[tuple[str, str]] = frozenset()
    """(event, stream) recorded during the capture, for event-based forks and joins."""


@dataclass
class _State:
    current: str = CURRENT
    streams: dict[str, str] = field(default_factory=dict)
    contexts: dict[str, str] = field(default_factory=dict)
    """Names bound to `torch.cuda.stream(s)` objects -> the stream their `with` makes current."""
    into: dict[str, frozenset[_Pending]] = field(default_factory=dict)
    """Host buffer -> device-to-host copies that may still be writing it."""
    out_of: dict[str, frozenset[_Pending]] = field(default_factory=dict)
    """Pinned host buffer -> host-to-device copies that may still be reading it."""
    pinned: frozenset[str] = frozenset()
    unrecorded: frozenset[str] = frozenset()
    capture: _Capture | None = None

    def copy(self) -> _State:
        return replace(
            self,
            streams=dict(self.streams),
            contexts=dict(self.contexts),
            into=dict(self.into),
            out_of=dict(self.out_of),
        )


def _join_pending(a: frozenset[_Pending], b: frozenset[_Pending]) -> frozenset[_Pending]:
    by_copy = {pending.copy: pending for pending in a}
    for pending in b:
        other = by_copy.get(pending.copy)
        by_copy[pending.copy] = (
            pending if other is None else _Pending(pending.copy, pending.after & other.after)
        )
    return frozenset(by_copy.values())


def _join_maps(
    a: dict[str, frozenset[_Pending]], b: dict[str, frozenset[_Pending]]
) -> dict[str, frozenset[_Pending]]:
    joined = dict(a)
    for key, pending in b.items():
        joined[key] = _join_pending(joined[key], pending) if key in joined else pending
    return joined


def _join_capture(a: _Capture | None, b: _Capture | None) -> _Capture | None:
    if a is None or b is None or a.stream != b.stream:
        return a or b
    return _Capture(
        a.stream, a.forked & b.forked, a.blocks | b.blocks, a.joined & b.joined, a.events & b.events
    )


def _join(states: Iterable[_State | None]) -> _State | None:
    live = [state for state in states if state is not None]
    if not live:
        return None
    result = live[0].copy()
    for state in live[1:]:
        if state.current != result.current:
            result.current = UNKNOWN
        result.streams = {k: v for k, v in result.streams.items() if state.streams.get(k) == v}
        result.contexts = {k: v for k, v in result.contexts.items() if state.contexts.get(k) == v}
        result.into = _join_maps(result.into, state.into)
        result.out_of = _join_maps(result.out_of, state.out_of)
        result.pinned &= state.pinned
        result.unrecorded |= state.unrecorded
        result.capture = _join_capture(result.capture, state.capture)
    return result


def _update(pendings: dict[str, frozenset[_Pending]], when: str | None, token: str) -> None:
    """Adds `token` to the copies ordered before `when` (all of them if `when` is None)."""
    for key, marks in pendings.items():
        pendings[key] = frozenset(
            _Pending(p.copy, p.after | {token}) if when is None or when in p.after else p for p in marks
        )


def _drop(pendings: dict[str, frozenset[_Pending]], token: str | None) -> None:
    """The host synced with `token` (every copy if None): the copies it covers are done."""
    for key in list(pendings):
        left = frozenset(p for p in pendings[key] if token is not None and token not in p.after)
        if left:
            pendings[key] = left
        else:
            del pendings[key]


class _Analysis(Interpreter[_State, Loop[_State]]):
    """Interprets one function (or module) body."""

    max_passes = _MAX_LOOP_PASSES
    _join = staticmethod(_join)

    def __init__(self, module: _ModuleFacts, hazards: dict[tuple[str, cst.CSTNode], HostHazard]) -> None:
        self.facts = module
        self.imports = module.imports
        self.hazards = hazards
        self.state = _State(pinned=frozenset(module.pinned))
        self.statement = None
        self.loops = []

    # ---- statements

    def _small(self, node: cst.BaseSmallStatement) -> None:
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if node.value is not None:
                self._assign(targets, node.value)
        elif isinstance(node, cst.AugAssign):
            self._eval(node.value)
            self._host_write(node.target, node)
            self._eval(node.target)
        elif isinstance(node, cst.Expr):
            self._eval(node.value)
        elif isinstance(node, cst.Return):
            if node.value is not None:
                self._hand_off(node.value)
            self.state = None
        elif isinstance(node, cst.Raise):
            self.state = None
        elif isinstance(node, cst.Del):
            for name in _targets(node.target):
                self._forget(name)
        elif isinstance(node, (cst.Break, cst.Continue)) and self.loops:
            loop = self.loops[-1]
            (loop.breaks if isinstance(node, cst.Break) else loop.continues).append(self.live)
            self.state = None
        elif isinstance(node, cst.Assert):
            self._eval(node.test)

    def _with(self, node: cst.With) -> None:
        outer, outer_capture = self.live.current, self.live.capture
        captures = False
        for item in node.items:
            self.statement = item
            expr = item.item
            qualified = self.imports.qualified(expr.func) if isinstance(expr, cst.Call) else None
            key = dotted_name(expr)
            if isinstance(expr, cst.Call) and qualified in STREAM_CONTEXTS:
                self._eval_args(expr, reads=False)
                self._enter_stream(self._context_stream(expr), item, node)
            elif key is not None and key in self.live.contexts:
                self._enter_stream(self.live.contexts[key], item, node)
            elif isinstance(expr, cst.Call) and qualified == GRAPH_CAPTURE:
                self._eval_args(expr, reads=False)
                given = next((a.value for a in expr.args if a.keyword and a.keyword.value == "stream"), None)
                capture_stream = (self._stream(given) if given is not None else None) or CAPTURE
                captures = True
                self.live.current = capture_stream
                self.live.capture = _Capture(capture_stream)
            else:
                self._eval(expr)
        self.run(node.body.body)
        if self.state is None:
            return
        self.live.current = outer
        if captures:
            self._end_capture()
            self.live.capture = outer_capture  # a capture nested in another fails; the outer goes on

    def _enter_stream(self, stream: str | None, item: cst.WithItem, node: cst.With) -> None:
        """A `with` item makes `stream` current; during a capture, that is a side stream block."""
        if stream is None:
            return
        capture = self.live.capture
        if capture is not None and stream != capture.stream:
            block = _Block(item, node, stream, stream in capture.forked)
            self.live.capture = replace(capture, blocks=capture.blocks | {block})
        self.live.current = stream

    def _context_stream(self, call: cst.Call) -> str | None:
        """The stream of `torch.cuda.stream(s)` / `StreamContext(stream=s)`; None for None."""
        arg = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "stream"), None)
        return self._stream(arg) if arg is not None else None

    def _loop_frame(self, head: _State) -> Loop[_State]:
        return Loop()

    def _loop_target(self, target: cst.BaseAssignTargetExpression) -> None:
        for name in _targets(target):
            self._forget(name)

    # ---- bindings

    def _assign(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        source = dotted_name(value)
        state = self.live
        if source is not None:  # `y = x`: a reference, no read; `y` names what `x` names
            for target in targets:
                key = dotted_name(target)
                if key is None:
                    self._host_write(target, value)
                    continue
                self._forget(key)
                for table in (state.into, state.out_of):
                    if source in table:
                        table[key] = table[source]
                if source in state.streams:
                    state.streams[key] = state.streams[source]
                if source in state.pinned:
                    state.pinned |= {key}
            return
        if isinstance(value, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
            self._hand_off(value)  # packing values up is no read
        else:
            self._eval(value)
        if self.state is None:
            return
        for target in targets:
            key = dotted_name(target)
            if key is None:
                self._host_write(target, value)
                continue
            self._forget(key)
            self._bind(key, value)

    def _bind(self, key: str, value: cst.BaseExpression) -> None:
        state = self.live
        if isinstance(value, cst.Subscript) and dotted_name(value.value) in state.pinned:
            state.pinned |= {key}
        if not isinstance(value, cst.Call):
            return
        qualified = self.imports.qualified(value.func)
        if qualified in EVENT_CONSTRUCTORS:
            state.unrecorded |= {key}
            _drop_token(state.into, f"event:{key}")  # a new event orders nothing yet
            _drop_token(state.out_of, f"event:{key}")
        elif qualified in (CURRENT_STREAM, DEFAULT_STREAM):
            state.streams[key] = self._stream(value) or key
        elif qualified in STREAM_CONTEXTS and (stream := self._context_stream(value)) is not None:
            state.contexts[key] = stream
        elif self.facts.pins and _pins(value):
            state.pinned |= {key}
        func = value.func
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if method == "record_event" and not value.args:
            stream = self._stream(func.value)
            if stream is not None:
                self._record(key, stream)
        elif _downloads(value):
            state.into[key] = frozenset({_Pending(_Copy(value, state.current), frozenset({state.current}))})
            state.pinned |= {key}

    def _forget(self, key: str) -> None:
        state = self.live
        state.into.pop(key, None)
        state.out_of.pop(key, None)
        state.streams.pop(key, None)
        state.contexts.pop(key, None)
        state.pinned -= {key}
        state.unrecorded -= {key}

    def _hand_off(self, expr: cst.BaseExpression) -> None:
        """A value given to code whose effect is unknown: not read here, no longer tracked."""
        key = dotted_name(expr)
        if key is not None:
            self.live.into.pop(key, None)
            self.live.out_of.pop(key, None)
            self.live.unrecorded -= {key}
        elif isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            for element in expr.elements:
                self._hand_off(element.value)
        elif isinstance(expr, cst.Dict):
            for item in expr.elements:
                if isinstance(item, cst.DictElement):
                    self._hand_off(item.key)
                self._hand_off(item.value)
        else:
            self._eval(expr)

    # ---- expressions

    def _eval(self, node: cst.CSTNode) -> None:
        if self.state is None:
            return
        if isinstance(node, (cst.Name, cst.Attribute)) and (key := dotted_name(node)) is not None:
            if isinstance(node, cst.Attribute) and node.attr.value in _METADATA:
                return
            self._host_read(key, node)
            if isinstance(node, cst.Attribute):
                self._eval(node.value)
        elif isinstance(node, cst.Call):
            self._call(node)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return
        elif isinstance(node, cst.Attribute):
            if node.attr.value not in _METADATA:
                self._eval(node.value)
        elif isinstance(node, cst.NamedExpr):
            self._assign([node.target], node.value)
        else:
            for child in _children(node):
                self._eval(child)

    def _call(self, node: cst.Call) -> None:
        func = node.func
        qualified = self.imports.qualified(func)
        if qualified == DEVICE_SYNC:
            self._host_sync(None)
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
            reading = builtin in _READING_BUILTINS and builtin not in self.facts.functions
            self._eval_args(node, reads=reading)
            if self.facts.syncs(builtin):
                self._host_sync(None)
            elif builtin in _SYNCING_BUILTINS:
                self._host_sync(self.live.current)
            return
        if not isinstance(func, cst.Attribute):
            self._eval(func)
            self._eval_args(node, reads=False)
            return
        if self._ordering(node, func):
            return
        method, receiver = func.attr.value, func.value
        key = dotted_name(receiver)
        if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls") and self.facts.syncs(method):
            self._eval_args(node, reads=False)
            self._host_sync(None)
            return
        if method in _STORING_METHODS:
            self._eval(receiver)
            for arg in node.args:
                self._hand_off(arg.value)
            return
        if method in _METADATA or (method in _DEVICE_BOUND and key is not None):
            self._eval_args(node, reads=False)
            if (
                method in _DEVICE_BOUND
                and key in self.live.pinned
                and _non_blocking(node)
                and not _to_host(node)
            ):
                self._upload(key, node)
            return
        if method == "copy_" and node.args:
            self._copy_into(receiver, node)
            return
        if _downloads(receiver):  # `x.to("cpu", non_blocking=True).tolist()`: read at once
            self._eval(receiver)
            stream = self.live.current
            self._hazard(kinds.HOST_READ_PENDING, node, buffer=_code(receiver), stream=stream, copy=receiver)
            self._eval_args(node, reads=True)
            return
        pending = key is not None and (key in self.live.into or key in self.live.out_of)
        self._eval(receiver)
        self._eval_args(node, reads=pending or key in self.live.pinned)
        if method.endswith("_") and not method.startswith("_"):
            self._host_write(receiver, node)
        elif (method in _HOST_SYNC_METHODS and not pending) or (
            method == "to" and not _non_blocking(node) and _to_host(node)
        ):
            self._host_sync(self.live.current)
        self._write_out(node)

    def _eval_args(self, node: cst.Call, *, reads: bool) -> None:
        """`reads`: the callee reads its arguments' data on the host (a torch op, `print`...);
        otherwise a buffer passed as is is handed off to unknown code."""
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "out":
                continue
            if reads:
                self._eval(arg.value)
            else:
                self._hand_off(arg.value)

    def _write_out(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "out":
                self._host_write(arg.value, node)

    def _copy_into(self, receiver: cst.BaseExpression, node: cst.Call) -> None:
        """`dst.copy_(src[, non_blocking])`: a download into a pinned `dst`, an upload from a
        pinned `src`, or (blocking, into a host buffer) a host write."""
        state = self.live
        source = node.args[0].value
        dst, src = _base(receiver), dotted_name(source)
        non_blocking = _non_blocking(node) or (
            len(node.args) > 1 and node.args[1].keyword is None and _is_true(node.args[1].value)
        )
        if src is not None and src in state.pinned and non_blocking:
            self._upload(src, node)
        elif src is not None:
            self._host_read(src, source)
        else:
            self._eval(source)
        if dst is None:
            self._eval(receiver)
        elif non_blocking and dst in state.pinned:
            self._pending_write_check(dst, node)
            state.into[dst] = frozenset({_Pending(_Copy(node, state.current), frozenset({state.current}))})
        elif not non_blocking:
            self._host_write(receiver, node)

    def _upload(self, key: str, node: cst.Call) -> None:
        state = self.live
        copy = _Pending(_Copy(node, state.current), frozenset({state.current}))
        state.out_of[key] = state.out_of.get(key, frozenset()) | {copy}

    # ---- host accesses

    def _host_read(self, key: str, node: cst.CSTNode) -> None:
        pending = self.live.into.pop(key, None)
        if pending:
            copy = next(iter(sorted(pending, key=lambda p: id(p.copy.node)))).copy
            self._hazard(kinds.HOST_READ_PENDING, node, buffer=key, stream=copy.stream, copy=copy.node)

    def _host_write(self, target: cst.BaseExpression, node: cst.CSTNode) -> None:
        key = _base(target)
        if key is None:
            self._eval(target)
            return
        if isinstance(target, cst.Subscript):
            for index in target.slice:
                self._eval(index)
        self._pending_write_check(key, node)
        self.live.into.pop(key, None)

    def _pending_write_check(self, key: str, node: cst.CSTNode) -> None:
        pending = self.live.out_of.pop(key, None)
        if pending:
            copy = next(iter(sorted(pending, key=lambda p: id(p.copy.node)))).copy
            self._hazard(kinds.HOST_WRITE_PENDING, node, buffer=key, stream=copy.stream, copy=copy.node)

    def _host_sync(self, token: str | None) -> None:
        _drop(self.live.into, token)
        _drop(self.live.out_of, token)

    def _hazard(
        self,
        kind: str,
        node: cst.CSTNode,
        span_node: cst.CSTNode | None = None,
        *,
        copy: cst.CSTNode | None = None,
        **fields: str,
    ) -> None:
        """Once per kind and node: loops revisit the same code."""
        span = span_node or self.statement or node
        self.hazards.setdefault(
            (kind, node), HostHazard(kind, node, span, tuple(sorted(fields.items())), copy)
        )

    # ---- streams, events, captures

    def _ordering(self, node: cst.Call, func: cst.Attribute) -> bool:
        """Calls on streams, events and graphs; False if `func` is none of them."""
        method, receiver = func.attr.value, func.value
        key = dotted_name(receiver)
        state = self.live
        if key is not None and (key in state.into or key in state.out_of or key in state.pinned):
            return False  # a host buffer's own method
        args = [arg.value for arg in node.args]
        capture = state.capture
        if method == "wait_stream" and args:
            waiter, producer = self._stream(receiver), self._stream(args[0])
            if waiter is not None and producer is not None:
                _update(state.into, producer, waiter)
                _update(state.out_of, producer, waiter)
                if capture is not None:
                    self._capture_order(waiter, producer)
        elif method in ("wait_event", "wait") and (args or method == "wait"):
            event_expr = args[0] if method == "wait_event" else receiver
            waiter_expr = receiver if method == "wait_event" else (args[0] if args else None)
            event = dotted_name(event_expr)
            waiter = self._stream(waiter_expr) if waiter_expr is not None else state.current
            if event is not None and event in state.unrecorded:
                self._hazard(kinds.WAIT_UNRECORDED_EVENT, node, event=event)
                state.unrecorded -= {event}
            if event is not None and waiter is not None:
                _update(state.into, f"event:{event}", waiter)
                _update(state.out_of, f"event:{event}", waiter)
                if capture is not None:
                    for captured, recorded_on in capture.events:
                        if captured == event:
                            self._capture_order(waiter, recorded_on)
        elif method == "record_event" and args:
            recorder, recorded = self._stream(receiver), dotted_name(args[0])
            if recorder is not None and recorded is not None:
                self._record(recorded, recorder)
        elif method == "record" and len(args) <= 1 and key is not None:
            on = self._stream(args[0]) if args else state.current
            if on is not None:
                self._record(key, on)
        elif method in ("synchronize", "query") and not args:
            synced = self._stream(receiver)
            if synced is not None:
                self._host_sync(synced)
            if key is not None:
                self._host_sync(f"event:{key}")
        elif method == "__enter__" and not args:
            state.current = UNKNOWN  # a context entered by hand: it may make any stream current
        elif method == "capture_begin":
            self._eval_args(node, reads=False)
            if state.current == CURRENT and not _is_self(receiver):
                self._hazard(kinds.CAPTURE_ON_DEFAULT_STREAM, node, graph=key or _code(receiver))
            else:
                state.capture = _Capture(state.current)
        elif method == "capture_end" and capture is not None:
            self._end_capture()
        else:
            return False
        return True

    def _record(self, event: str, stream: str) -> None:
        state = self.live
        token = f"event:{event}"
        _drop_token(state.into, token)
        _drop_token(state.out_of, token)
        _update(state.into, stream, token)
        _update(state.out_of, stream, token)
        state.unrecorded -= {event}
        if state.capture is not None:
            events = frozenset(e for e in state.capture.events if e[0] != event) | {(event, stream)}
            state.capture = replace(state.capture, events=events)

    def _capture_order(self, waiter: str, producer: str) -> None:
        """`waiter` now comes after `producer`'s work: a fork from, or a join into, the capture."""
        capture = self.live.capture
        assert capture is not None
        if producer == capture.stream:
            capture = replace(capture, forked=capture.forked | {waiter})
        if waiter == capture.stream:
            capture = replace(
                capture, joined=capture.joined | {b for b in capture.blocks if b.stream == producer}
            )
        self.live.capture = capture

    def _end_capture(self) -> None:
        capture = self.live.capture
        if capture is None:
            return
        self.live.capture = None
        for block in capture.blocks:
            joined = block in capture.joined
            if block.forked and joined:
                continue
            if not block.forked and not joined:
                missing = "neither forked from nor joined back to"
            else:
                missing = "not joined back to" if block.forked else "not forked from"
            self._hazard(
                kinds.UNJOINED_CAPTURE_FORK,
                block.item,
                block.node,
                stream=block.stream,
                capture=capture.stream,
                missing=missing,
            )

    def _stream(self, expr: cst.BaseExpression | None) -> str | None:
        if expr is None or (isinstance(expr, cst.Name) and expr.value == "None"):
            return None
        if isinstance(expr, cst.Call):
            qualified = self.imports.qualified(expr.func)
            if qualified == CURRENT_STREAM:
                return self.live.current
            if qualified == DEFAULT_STREAM:
                return CURRENT
        key = dotted_name(expr)
        if key is not None and key in self.live.streams:
            return self.live.streams[key]
        return _code(expr)


def _is_self(expr: cst.BaseExpression) -> bool:
    """`self.capture_begin()`, `super().capture_begin()`: a graph class wrapping its own
    capture, on whatever stream its caller made current."""
    if isinstance(expr, cst.Call):
        return isinstance(expr.func, cst.Name) and expr.func.value == "super"
    return isinstance(expr, cst.Name) and expr.value == "self"


def _drop_token(pendings: dict[str, frozenset[_Pending]], token: str) -> None:
    """Re-recording an event replaces what it captured."""
    for key, marks in pendings.items():
        pendings[key] = frozenset(_Pending(p.copy, p.after - {token}) for p in marks)


def _targets(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _targets(element.value)
    elif isinstance(target, cst.BaseExpression) and (key := dotted_name(target)) is not None:
        yield key


def _base(expr: cst.BaseExpression) -> str | None:
    """The buffer an expression writes through: `buf`, `buf[i]`, `self.buf[:n]`."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted_name(expr)


def _code(expr: cst.BaseExpression) -> str:
    return dotted_name(expr) or cst.Module(body=[]).code_for_node(expr)


def _is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _non_blocking(call: cst.Call) -> bool:
    return any(
        arg.keyword is not None and arg.keyword.value == "non_blocking" and _is_true(arg.value)
        for arg in call.args
    )


def _downloads(expr: cst.BaseExpression) -> bool:
    """`x.to("cpu", non_blocking=True)`: a device-to-host copy whose result may not be there yet."""
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "to"
        and _non_blocking(expr)
        and _to_host(expr)
    )


def _to_host(call: cst.Call) -> bool:
    """`x.to("cpu", ...)`, `x.to(device="cpu")`, `x.to(torch.device("cpu"))`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value != "device":
            continue
        value = arg.value
        if isinstance(value, cst.Call) and value.args:
            value = value.args[0].value
        if isinstance(value, cst.SimpleString) and value.evaluated_value in ("cpu", b"cpu"):
            return True
    return False


def _pins(expr: cst.CSTNode) -> bool:
    """The expression makes pinned host memory: `.pin_memory()`, `pin_memory=True`."""
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "pin_memory":
            return True
        if any(
            arg.keyword is not None and arg.keyword.value == "pin_memory" and _is_true(arg.value)
            for arg in expr.args
        ):
            return True
    return any(
        _pins(child) for child in _children(expr) if not isinstance(child, (cst.Lambda, cst.FunctionDef))
    )


@dataclass
class _ModuleFacts:
    imports: ImportTable = field(default_factory=ImportTable)
    functions: dict[str, list[cst.FunctionDef]] = field(default_factory=dict)
    """Same-module functions and methods by their bare name."""
    pinned: set[str] = field(default_factory=set)
    """`self.x` attributes assigned pinned memory somewhere in the module."""
    pins: bool = True
    """The module's text mentions pinning at all: if not, no expression needs looking into."""
    syncing: bool = True
    """Likewise for `synchronize`."""
    _syncing: dict[str, bool] = field(default_factory=dict)

    def syncs(self, name: str) -> bool:
        """A same-module function of that name synchronizes the host somewhere in its body."""
        if not self.syncing:
            return False
        if name not in self._syncing:
            self._syncing[name] = any(
                _finds(function.body, self._is_sync) for function in self.functions.get(name, ())
            )
        return self._syncing[name]

    def _is_sync(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        return self.imports.qualified(func) == DEVICE_SYNC or (
            isinstance(func, cst.Attribute) and func.attr.value == "synchronize"
        )


def _scan(body: Sequence[cst.CSTNode], facts: _ModuleFacts) -> None:
    """Imports, function definitions and pinned attributes, by statements: a libcst visitor
    would cost as much as the parse."""
    for node in body:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    facts.imports.add(small)
                elif isinstance(small, cst.Assign) and facts.pins and _pins(small.value):
                    facts.pinned.update(
                        key
                        for target in small.targets
                        if (key := dotted_name(target.target)) is not None and key.startswith("self.")
                    )
        elif isinstance(node, cst.FunctionDef):
            facts.functions.setdefault(node.name.value, []).append(node)
            _scan(node.body.body, facts)
        elif isinstance(node, cst.BaseCompoundStatement):
            for suite in _suites(node):
                _scan(suite, facts)


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


def _finds(node: cst.CSTNode, predicate: Callable[[cst.CSTNode], bool]) -> bool:
    return predicate(node) or any(_finds(child, predicate) for child in _children(node))


def _children(node: cst.CSTNode) -> Sequence[cst.CSTNode]:
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


@lru_cache(maxsize=4)
def _host_hazards(module: cst.Module, source: str) -> tuple[HostHazard, ...]:
    facts = _ModuleFacts(pins="pin_memory" in source, syncing="synchronize" in source)
    _scan(module.body, facts)
    if not facts.imports.imports_torch:
        return ()
    hazards: dict[tuple[str, cst.CSTNode], HostHazard] = {}
    _Analysis(facts, hazards).run(module.body)
    for functions in facts.functions.values():
        for function in functions:
            _Analysis(facts, hazards).run(function.body.body)
    return tuple(hazards.values())


_RELEVANT = re.compile(r"non_blocking|Event|capture_begin|graph\(")
"""Without one of these no rule here can fire: most files are skipped without a walk."""


def host_hazards(flow: ModuleFlow) -> tuple[HostHazard, ...]:
    """Every host-side hazard of the module; cached, since five rules read it."""
    if not _RELEVANT.search(flow.source):
        return ()
    return _host_hazards(flow.module, flow.source)


def host_location(flow: ModuleFlow, hazard: HostHazard) -> Location:
    """`finding()` keyword arguments for a host hazard."""
    where = flow.range(hazard.node)
    span = flow.range(hazard.span_node)
    return {
        "line": where.start.line,
        "column": where.start.column + 1,
        "end_line": where.end.line,
        "end_column": where.end.column + 1,
        "span": Span(span.start.line, span.end.line),
    }


def describe(stream: str) -> str:
    if stream == CURRENT:
        return "the current stream"
    if stream == CAPTURE:
        return "the capture stream"
    return f"stream '{stream}'"


def expression(stream: str) -> str:
    if stream in (CURRENT, CAPTURE):
        return "torch.cuda.current_stream()"
    return stream


def fields(flow: ModuleFlow, hazard: HostHazard) -> dict[str, str]:
    """Message fields of a hazard: its own, plus `{stream}`/`{stream_code}`, `{copy_line}`."""
    result = dict(hazard.fields)
    if hazard.copy is not None:
        result["copy_line"] = str(flow.line(hazard.copy))
    for name in ("stream", "capture"):
        if name in result:
            result[f"{name}_code"] = expression(result[name])
            result[name] = describe(result[name])
    return result
