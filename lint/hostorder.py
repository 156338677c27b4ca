"""The orderings host-side analysis follows (lint/hostflow.py): calls on streams, events and
graphs — waits, records, syncs, polls seen returning True — and the CUDA graph capture they fork
from and join into. A mixin of hostflow's interpreter, as lint/streams.py is of streamflow's; with the `with`
statements that enter streams and captures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.tokens import CURRENT, DEFAULT, UNKNOWN, choice, event_token
from csan_lint.lint.hostfacts import ModuleFacts, is_self, written_buffer
from csan_lint.lint.hoststate import CAPTURE, Block, Capture, HostState, drop_pending, forget_token, update_pending
from csan_lint.lint.names import GRAPH_CAPTURE, ImportTable, dotted_name
from csan_lint.lint.ordering import query_poll
from csan_lint.lint.recognize import entered_streams
from csan_lint.lint.streams import stream_token
from csan_lint.lint.values import code_of
from csan_lint.runtime import kinds

_LITERALS = (cst.SimpleString, cst.Integer, cst.Float, cst.Imaginary)


class HostOrdering:
    """The ordering half of hostflow's `_Analysis`."""

    imports: ImportTable
    default: str
    state: HostState | None
    live: HostState
    facts: ModuleFacts
    statement: cst.CSTNode | None
    _hazard: Callable[..., None]
    _eval_args: Callable[..., None]
    _eval: Callable[[cst.CSTNode], None]
    run: Callable[[Sequence[cst.BaseStatement | cst.BaseSmallStatement]], None]

    def _followed(self, key: str | None) -> bool:
        """A host buffer this analysis follows (copies pending into or out of it, or pinned)."""
        state = self.live
        return key is not None and (key in state.into or key in state.out_of or key in state.pinned)

    def _may_be_on_device(self, expr: cst.BaseExpression) -> bool:
        """What a syncing builtin (`print`, `int`...) may copy from the device: not a literal (of
        a formatted string, one of its expressions), nor a host buffer followed here."""
        if isinstance(expr, cst.FormattedString):
            return any(
                self._may_be_on_device(part.expression)
                for part in expr.parts
                if isinstance(part, cst.FormattedStringExpression)
            )
        if isinstance(expr, cst.ConcatenatedString):
            return self._may_be_on_device(expr.left) or self._may_be_on_device(expr.right)
        if isinstance(expr, _LITERALS):
            return False
        return not self._followed(written_buffer(expr))

    def _host_sync(self, token: str | None) -> None:
        drop_pending(self.live.into, token)
        drop_pending(self.live.unplaced, token)
        drop_pending(self.live.out_of, token)

    def _ordering(self, node: cst.Call, func: cst.Attribute) -> bool:
        """Calls on streams, events and graphs; False if `func` is none of them."""
        method, receiver = func.attr.value, func.value
        key = dotted_name(receiver)
        state = self.live
        if self._followed(key):
            return False  # a host buffer's own method
        args = [arg.value for arg in node.args]
        capture = state.capture
        op, by_stream = api.method_op(method)
        if op == api.WAIT_STREAM and args:
            waiter, producer = self._stream(receiver), self._stream(args[0])
            if waiter is not None and producer is not None:
                update_pending(state.into, producer, waiter)
                update_pending(state.unplaced, producer, waiter)
                update_pending(state.out_of, producer, waiter)
                if capture is not None:
                    self._capture_order(waiter, producer)
        elif op == api.WAIT_EVENT and (args or not by_stream):  # `s.wait_event(e)`, `e.wait([s])`
            event_expr = args[0] if by_stream else receiver
            waiter_expr = receiver if by_stream else (args[0] if args else None)
            event = dotted_name(event_expr)
            waiter = self._stream(waiter_expr) if waiter_expr is not None else state.current
            if event is not None and event in state.unrecorded:
                self._hazard(kinds.WAIT_UNRECORDED_EVENT, node, event=event)
                state.unrecorded -= {event}
            if event is not None and waiter is not None:
                update_pending(state.into, event_token(event), waiter)
                update_pending(state.unplaced, event_token(event), waiter)
                update_pending(state.out_of, event_token(event), waiter)
                if capture is not None:
                    for captured, recorded_on in capture.events:
                        if captured == event:
                            self._capture_order(waiter, recorded_on)
        elif op == api.RECORD and by_stream and args:  # `s.record_event(e)`
            recorder, recorded = self._stream(receiver), dotted_name(args[0])
            if recorder is not None and recorded is not None:
                self._record(recorded, recorder)
        elif op == api.RECORD and not by_stream and len(args) <= 1 and key is not None:  # `e.record([s])`
            on = self._stream(args[0]) if args else state.current
            if on is not None:
                self._record(key, on)
        elif op == api.QUERY_RECEIVER and not args:
            pass  # a poll: it orders only where it returned True (`_polled`)
        elif op == api.SYNC_RECEIVER and not args:
            synced = self._stream(receiver)
            if synced is not None:
                self._host_sync(synced)
            if key is not None:
                self._host_sync(event_token(key))
        elif method == "__enter__" and not args:
            state.current = UNKNOWN  # a context entered by hand: it may make any stream current
        elif op is not None and op.kind is Kind.CAPTURE_BEGIN:
            self._eval_args(node, reads=False)
            if state.current in (CURRENT, DEFAULT) and not is_self(receiver):
                self._hazard(kinds.CAPTURE_ON_DEFAULT_STREAM, node, graph=key or code_of(receiver))
            else:
                state.capture = Capture(state.current)
        elif op is not None and op.kind is Kind.CAPTURE_END and capture is not None:
            self._end_capture()
        else:
            return False
        return True

    def _polled(self, test: cst.BaseExpression, *, outcome: bool) -> None:
        """Where `r.query()` returned True the host is past r's work, as in streamflow."""
        poll = query_poll(test)
        if poll is not None and poll[1] == outcome and self.state is not None:
            synced = self._stream(poll[0])
            if synced is not None:
                self._host_sync(synced)
            if (key := dotted_name(poll[0])) is not None:
                self._host_sync(event_token(key))

    def _record(self, event: str, stream: str) -> None:
        state = self.live
        token = event_token(event)
        for pendings in (state.into, state.out_of, state.unplaced):
            forget_token(pendings, token)
            update_pending(pendings, stream, token)
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
            capture = replace(capture, joined=capture.joined | {b for b in capture.blocks if b.stream == producer})
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
        if expr is None:
            return None
        return stream_token(expr, self.imports, self.live.current, self.live.streams, self.default)

    # ---- stream contexts and captures

    def _with(self, node: cst.With) -> None:
        outer, outer_capture = self.live.current, self.live.capture
        captures = False
        for item in node.items:
            self.statement = item
            expr = item.item
            qualified = self.imports.qualified(expr.func) if isinstance(expr, cst.Call) else None
            if (stream := self._context_stream(expr)) is not None:
                if isinstance(expr, cst.Call):
                    self._eval_args(expr, reads=False)
                self._enter_stream(stream, item, node)
            elif isinstance(expr, cst.Call) and qualified == GRAPH_CAPTURE:
                self._eval_args(expr, reads=False)
                given = next((a.value for a in expr.args if a.keyword and a.keyword.value == api.STREAM_KEYWORD), None)
                capture_stream = (self._stream(given) if given is not None else None) or CAPTURE
                captures = True
                self.live.current = capture_stream
                self.live.capture = Capture(capture_stream)
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
            block = Block(item, node, stream, stream in capture.forked)
            self.live.capture = replace(capture, blocks=capture.blocks | {block})
        self.live.current = stream

    def _context_stream(self, expr: cst.BaseExpression) -> str | None:
        """The stream a `with` item makes current, None if it is no stream context: a context
        bound here (`ctx`, or `ctx()` of a `functools.partial`), or any spelling recognize.py knows."""
        key = dotted_name(expr.func if isinstance(expr, cst.Call) else expr)
        if key is not None and key in self.live.contexts:
            return self.live.contexts[key]
        entered = entered_streams(expr, self.imports, self.facts.contexts, self.live.streams.__contains__)
        return None if entered is None else choice(map(self._stream, entered))
