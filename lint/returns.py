"""Returns: what a function hands back to its caller. The value returned (for the function's
summary, lint/effects.py, and the caller's names for it), and the side-stream work still
pending on the caller's tensors when it returns.

Part of `FunctionAnalysis` (lint/accesses.py); the methods it calls that are not here live in
the other parts (bindings, values, accesses).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from csan_lint.lint.callers import CallersJoin
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import parameters
from csan_lint.lint.ordering import CURRENT, Access, FlowState, HazardKind, Mark, TrackedTensor, distinct, issued_on
from csan_lint.lint.recognize import OR
from csan_lint.lint.scan import kept_tensor_params, tensor_annotation
from csan_lint.lint.values import Value, called_or_named

_NOT_TENSORS = ("stream", "context", "event", "host")
"""Kinds of values a call may return that are never tensors."""


class Returns:
    """The return half of `FunctionAnalysis`."""

    imports: ImportTable
    function: str | None
    maybe_tensors: set[str]
    live: FlowState
    silent: int
    entry_stream: str
    bound: set[str]
    caller_owned: frozenset[str]
    caller_kept: frozenset[str]
    borrowed: set[str]
    callers_items: set[str]
    recorded_somewhere: set[str]
    caller_streams: frozenset[str]
    joined_at_entry: set[str]
    callers_join: CallersJoin
    records: set[tuple[str, str]]
    exits: list[FlowState]
    returned: set[tuple[int | None, Mark]]
    allocated_returns: set[frozenset[str]]
    made_on: dict[str, str]
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _value: Callable[[cst.BaseExpression], Value]
    _fresh: Callable[[cst.BaseExpression], bool]
    _make_access: Callable[..., Access]
    _hazard: Callable[..., None]
    _release_all: Callable[[cst.CSTNode | None], None]

    def produced_by_caller(self, function: cst.FunctionDef, callers: CallersJoin) -> None:
        """The parameters are the caller's. Those annotated as tensors were written by it before
        the call, on the stream current then (an unannotated one may be anything: ready), and
        side-stream work on them still pending at return is left to it; unless every caller in
        the module forks, or joins, that stream itself (`callers`)."""
        self.callers_join = callers
        params = parameters(function)
        self.caller_owned = frozenset(self.maybe_tensors)
        self.caller_kept = kept_tensor_params(function) & self.caller_owned
        self.caller_streams = frozenset(param.name.value for param in params)
        for param in params:
            name = param.name.value
            annotation = param.annotation
            if name in self.maybe_tensors and annotation is not None and tensor_annotation(annotation.annotation):
                access = Access(param.name, CURRENT, True, function, self.function, "by the caller")
                self.live.tensors[name] = TrackedTensor(
                    writes=frozenset({Mark(access, frozenset({CURRENT}))}), unsure=True
                )

    def _note_returned(self, value: cst.BaseExpression) -> None:
        """What a `return` hands back, for the function's summary: a returned tensor's last
        writes, or a value computed at the return (`cast(T, self.model(x))`), written there; a
        result of unknown code is a tensor where the caller uses it as one (`unsure`); and whether
        it is memory allocated here, on which tests of parameters against `None`."""
        if self._allocates(value):
            self.allocated_returns.add(
                frozenset(fact.name for fact in self.live.facts if fact.kind == "in" and fact.values == {None})
            )
        listed = isinstance(value, (cst.Tuple, cst.List))
        elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        for index, element in enumerate(elements) if not self.silent else ():
            position = index if listed else None
            if isinstance(element, cst.Call) and self.imports.qualified(element.func) == "typing.cast":
                element = element.args[-1].value  # `cast(T, x)` is `x`
            tensor = self.live.tensors.get(dotted_name(element) or "")
            if tensor is not None:
                self.returned.update((position, mark) for mark in tensor.writes)
            elif isinstance(element, cst.Call) and self._value(element).kind not in _NOT_TENSORS:
                mark = Mark(self._make_access(element, write=True), issued_on(self.live.current))
                self.returned.add((position, mark))

    def _allocates(self, value: cst.BaseExpression) -> bool:
        """`value` is memory certainly allocated here on the stream current at the call."""
        if self.silent or self.live.current != CURRENT:
            return False
        key = dotted_name(value) if isinstance(value, cst.Name) else None
        return self.made_on.get(key) == CURRENT if key is not None else self._fresh(value)

    def _return(self, node: cst.Return | None) -> None:
        """The caller continues from here: tensors die, and work still pending on a side stream
        on the caller's tensors (`caller_owned`) is left to a caller that knows of no stream or
        event to join it with: unless anything but tensors is returned (an event, a stream, a
        future or an object that may hold one), or the stream is recorded, on some path, in an
        event the caller can reach (`self.done`, a parameter)."""
        if node is not None and node.value is not None:
            self._note_returned(node.value)
        handed_back = (
            node is not None
            and node.value is not None
            and any(key not in self.live.tensors for key in called_or_named(node.value))
        )
        for key in sorted((self.caller_owned - self.bound) | self.borrowed) if not handed_back else ():
            tensor = self.live.tensors.get(key)
            if tensor is None:
                continue
            pending_writes = [mark for mark in tensor.writes if self._pending_at_return(mark)]
            for mark in pending_writes:
                self._hazard(HazardKind.READ_AFTER_WRITE, key, mark.access, mark.access.stream, node, returned=True)
            for mark in (
                tensor.reads if not pending_writes and key in self.caller_kept else ()
            ):  # the caller's next write
                if self._pending_at_return(mark):
                    self._hazard(HazardKind.WRITE_AFTER_READ, key, mark.access, mark.access.stream, node, returned=True)
        for key in sorted(self.callers_items - self.recorded_somewhere) if not handed_back else ():
            tensor = self.live.tensors.get(key)
            for mark in tensor.writes if tensor is not None else ():  # read only: may be kept (`caller_kept`)
                if self._pending_at_return(mark):
                    self._hazard(HazardKind.FREE_IN_USE, key, mark.access, self.entry_stream, node, dropped=True)
        self.exits.append(self.live.copy())
        self._release_all(None)

    def _pending_at_return(self, mark: Mark) -> bool:
        """An access on a side stream the caller does not know of, not joined into the current
        stream, and not recorded in an event the caller can reach."""
        stream = mark.access.stream
        return (
            distinct(stream, CURRENT)
            and not mark.orders(CURRENT)
            and stream not in self.caller_streams
            and not set(stream.split(OR)) - {CURRENT} <= self.joined_at_entry
            and not all(map(self.callers_join, set(stream.split(OR)) - {CURRENT}))
            and not any(on == stream and self._reachable_event(event) for event, on in self.records)
        )

    def _reachable_event(self, token: str) -> bool:
        """An event the caller holds too: stored on `self`, or passed in."""
        root = token.removeprefix("event:").split(".", 1)[0]
        return token.startswith("event:") and (root in ("self", "cls") or root in self.caller_streams)

    def _bind_returned(self, target: cst.BaseExpression, returned: dict[int | None, Mark]) -> None:
        """`x = f()`, `a, b = f()`: each name starts from the write, on the callee's stream, of
        the value it gets (by position in a returned tuple, else the whole value's)."""
        elements = [element.value for element in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
        named = list(enumerate(elements)) if elements else [(None, target)]
        for index, element in named:
            mark = returned.get(index) or returned.get(None)
            if isinstance(element, cst.Name) and mark is not None:
                self.live.tensors[element.value] = TrackedTensor(writes=frozenset({mark}), unsure=True)
