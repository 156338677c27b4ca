"""Streams and events: which stream an expression denotes, and the ordering calls on streams
and events (`wait_stream`, `wait_event`, `record`, `synchronize`, a `query()` seen True).

A stream is named by a token: `<current>` for the stream current at entry, a tracked binding,
or the expression's own source text (`s`, `self.copy_stream`); an event recorded on stream
`s` is the token `event:<name>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.assumptions import ENTRY_STREAM_IS_DEFAULT, UNRECORDED_EVENTS_FOLLOW_CALLERS
from csan_lint.lint.analysis.tokens import (
    CURRENT,
    DEFAULT,
    HOST,
    UNKNOWN,
    alternatives,
    choice,
    event_token,
    every_item,
    every_item_of_each,
    is_choice,
    is_event,
    item_key,
    root,
)
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import Caller
from csan_lint.lint.effects import probe_key
from csan_lint.lint.itemwaits import is_item_token, item_waits, items_wait
from csan_lint.lint.names import CURRENT_STREAM, GRAPH_CAPTURE, ImportTable, dotted_name
from csan_lint.lint.ordering import (
    LAUNCH_ACCESS,
    Access,
    FlowState,
    Hazard,
    HazardKind,
    Mark,
    MarkUpdate,
    TrackedTensor,
    launch_key,
    query_poll,
)
from csan_lint.lint.pathfacts import Facts
from csan_lint.lint.recognize import NO_FUNCTIONS, entered_streams, is_exit_stack
from csan_lint.lint.scan import body_of
from csan_lint.lint.values import code_of

if TYPE_CHECKING:
    from csan_lint.lint.effects import Helpers


class Streams:
    """The stream half of `FunctionAnalysis`: stream identity, the orderings calls make, the
    allocator's record of streams (`record_stream`), and CUDA graphs captured and replayed."""

    anypath: AnyPath
    caller: Caller

    imports: ImportTable
    state: FlowState | None
    live: FlowState
    tokens: set[str]
    """Streams and events the ordering calls named: a summary probes each of them."""
    entry_stream: str
    helpers: Helpers | None
    function: str | None
    records: set[tuple[str, str]]
    """(event, stream) for every record made on any path."""
    hazards: dict[tuple[object, ...], Hazard]
    silent: int
    """Depth of blocks on an UNKNOWN stream: nothing in them is judged."""
    _make_access: Callable[..., Access]
    _access: Callable[..., None]
    _assume: Callable[[cst.BaseExpression, bool], None]
    _demote: Callable[..., None]
    _default_join: Callable[[cst.Call, str, str, cst.BaseExpression], None]
    run: Callable[[Sequence[cst.BaseStatement | cst.BaseSmallStatement]], None]
    graphs: dict[str, tuple[set[str], set[str]]]
    """CUDA graphs captured here -> the keys their capture read and wrote (static inputs, outputs)."""
    captures: list[tuple[str, set[str], set[str]]]
    block: cst.With | None
    statement: cst.CSTNode | None
    _eval: Callable[[cst.CSTNode], None]
    _made_current: Callable[[str], None]
    _entered_is_a_stream: Callable[[str], Facts]
    _assumes: Callable[[str], bool]

    def _capture(self, graph: str, node: cst.With) -> None:
        """`with torch.cuda.graph(g):`: the tensors the body reads and writes are g's static
        inputs and outputs, which each `g.replay()` reads and writes on the current stream. The
        capture runs none of its stream's kernels, so their accesses are dropped after it and
        only a replay's meet the work around it; another stream's work in the block runs now
        (a stream not forked from the capture is not captured: CSL502)."""
        before, capturing = dict(self.live.tensors), self.live.current
        seeded: frozenset[str] = frozenset()
        if self.state is not None and self.helpers is not None:  # the class's tensors: static memory
            seeded = self.helpers.tensor_attributes() - self.live.tensors.keys()
            self.live.tensors.update(dict.fromkeys(seeded, TrackedTensor()))
        self.captures.append((capturing, set(), set()))
        self.run(body_of(node.body))
        _, inputs, outputs = self.captures.pop()
        self.graphs[graph] = inputs, outputs
        if self.state is not None:
            for key in sorted(set().union(*self.graphs[graph])):
                self.live.tensors[key] = _uncaptured(self.live.tensors[key], before.get(key), capturing)
            for key in seeded:
                if self.live.tensors.get(key) == TrackedTensor():
                    del self.live.tensors[key]  # seeded, and the block did nothing with it

    def _captured_in_class(self, graph: str) -> tuple[frozenset[str], frozenset[str]] | None:
        """A graph on `self` that another method of the class captures (its summary's
        `captures`): the tensors of `self` the capture read and wrote, which a replay here reads
        and writes."""
        owner = (self.function or "").rpartition(".")[0]
        if not graph.startswith("self.") or self.helpers is None or not owner:
            return None
        for name in self.helpers.functions:
            if name.rpartition(".")[0] != owner or name == self.function:
                continue
            summary = self.helpers.summary(name)
            for captured, inputs, outputs in summary.captures if summary is not None else ():
                if captured == graph:
                    return inputs, outputs
        return None

    def _replay(self, captured: tuple[AbstractSet[str], AbstractSet[str]], node: cst.Call) -> None:
        """`g.replay()`: the captured kernels run again on the current stream, reading the
        capture's inputs and writing its outputs."""
        inputs, outputs = captured
        for key in sorted(inputs):
            self._access(key, node, write=False)
        for key in sorted(outputs):
            self._access(key, node, write=True)

    def _stream_method(self, node: cst.Call, func: cst.Attribute) -> bool:
        """Ordering calls on streams and events; False if `func` is none of them."""
        method, receiver = func.attr.value, func.value
        args = [arg.value for arg in node.args]
        op, by_stream = api.method_op(method)
        waits_event = op == api.WAIT_EVENT and not by_stream  # `e.wait([s])`
        if waits_event and not args and (key := dotted_name(receiver)) in self.live.tensors:
            self._demote(key, proven=True)  # no tensor has `.wait()`: a collective's handle, waited below
        if op == api.WAIT_STREAM and args:
            waiter, producer = self._stream(receiver), self._stream(args[0])
            if waiter is not None and producer is not None and waiter != producer:
                if waiter == self.entry_stream and launch_key(producer) not in self.live.tensors:
                    self.anypath.joined_at_entry.add(producer)
                self._order(MarkUpdate(producer, waiter))
                if waiter != CURRENT and self._may_be_callers(args[0]):
                    self._order(MarkUpdate(CURRENT, waiter))
                self._default_join(node, waiter, producer, args[0])
            elif waiter is not None and waiter == producer:
                self._self_wait(node, waiter)
        elif op == api.WAIT_EVENT and by_stream and args and (recorder := recorded_inline(args[0])) is not None:
            waiter, producer = self._stream(receiver), self._stream(recorder)
            if waiter is not None and producer is not None and waiter != producer:
                self._default_join(node, waiter, producer, recorder)
                self._order(MarkUpdate(producer, waiter))  # `s.wait_event(r.record_event())`: a wait on r
            elif waiter is not None and waiter == producer:
                self._self_wait(node, waiter)
        elif op == api.WAIT_EVENT and by_stream and args:
            waiter, event = self._stream(receiver), self._event(args[0])
            if waiter is not None and event is not None:
                if callers_event(event, self.caller.streams, self.records) and self._assumes(
                    UNRECORDED_EVENTS_FOLLOW_CALLERS
                ):
                    self._waits_for_caller(waiter)
                self._default_join(node, waiter, event, args[0])
                self._order(MarkUpdate(event, waiter))
        elif op == api.RECORD and by_stream and args:
            stream, event = self._stream(receiver), self._event(args[0])
            if stream is not None and event is not None:
                self._record(event, stream)
        elif op == api.RECORD and not by_stream and dotted_name(receiver) not in self.live.tensors:
            stream, event = (self._stream(args[0]) if args else self.live.current), self._event(receiver)
            if stream is not None and event is not None:
                self._record(event, stream)
        elif waits_event and (recorder := recorded_inline(receiver)) is not None:
            waiter, producer = (self._stream(args[0]) if args else self.live.current), self._stream(recorder)
            if waiter is not None and producer is not None and waiter != producer:
                self._order(MarkUpdate(producer, waiter))  # `r.record_event().wait(s)`: s waits on r
        elif waits_event and not args and self._collection_item(receiver):
            self._order(MarkUpdate(CURRENT, self.live.current))  # a collective's handle kept in a list
        elif waits_event and dotted_name(receiver) not in self.live.tensors:
            waiter, event = (self._stream(args[0]) if args else self.live.current), self._event(receiver)
            if waiter is not None and event is not None:
                self._order(MarkUpdate(event, waiter))
        elif op == api.SYNC_RECEIVER and not args and dotted_name(receiver) not in self.live.tensors:
            self._host_waits(receiver)
        elif op == api.QUERY_RECEIVER and not args:
            pass  # a poll from the host: it orders only where it returned True (`_polled`)
        else:
            return False
        return True

    def _waited_every_item(self, loop: cst.For | cst.While) -> None:
        """After a loop that waits on each item of a collection, its waiter is ordered after
        every item of it that an access here is on or ordered before, and every stream an item
        is bound to (`streams = [a, b]`: a and b); after one in which each item waits, every
        item is ordered after what it waited on (lint/itemwaits.py)."""
        for waiting in items_wait(loop):
            waited = self._event(waiting.waited) if waiting.event else self._stream(waiting.waited)
            if waited is not None and waited != UNKNOWN:
                parts = every_item_of_each(self.live.streams.get(item_key(waiting.collection)))
                for token in {every_item(waiting.collection), *parts}:  # `pool = comm + copy`: each's too
                    self._order(MarkUpdate(waited, token))
        waits = [(wait, waiter) for wait in item_waits(loop) if (waiter := self._stream(wait.waiter)) is not None]
        if not waits:
            return
        marks = [mark for tensor in self.live.tensors.values() for mark in tensor.writes | tensor.reads | tensor.uses]
        named = {token for mark in marks for token in (*mark.after, *alternatives(mark.access.stream))}
        for wait, waiter in waits:
            bound = {
                part
                for key, stream in self.live.streams.items()
                if is_item_token(key, wait)
                for part in alternatives(stream)
            }
            items = {token for token in named if is_item_token(token, wait)} | bound
            for token in sorted(items - {waiter, UNKNOWN}):
                self._order(MarkUpdate(token, waiter))

    def _self_wait(self, node: cst.Call, stream: str) -> None:
        """A side stream waits on itself: `s.wait_stream(current_stream())` inside
        `with stream(s):` (or in a function always entered on `s`), where the current stream is
        `s`. The wait orders nothing, and the stream current before the block, which it was
        meant to name, is not waited on. A stream chosen at run time between a side stream and
        the current one (`s if c else current_stream()`) is judged on the path of the side
        stream; not one chosen between side streams, nor an unknown one."""
        sides = set(alternatives(stream)) - {CURRENT}
        if stream != self.live.current or len(sides) != 1 or not self._definite(next(iter(sides))):
            return
        access = self._make_access(node, write=False)
        hazard = Hazard(HazardKind.READ_AFTER_WRITE, "", access, CURRENT, function=self.function, no_op=True)
        self.hazards.setdefault(("self-wait", node), hazard)

    def _definite(self, stream: str) -> bool:
        """One known stream, outside blocks on an unknown one: not UNKNOWN, not chosen at run time."""
        return not self.silent and stream != UNKNOWN and not is_choice(stream)

    def _may_be_callers(self, stream: cst.BaseExpression) -> bool:
        """A stream of unknown identity that may be the one current at entry: a parameter not
        rebound (the caller may pass its own), or a loop's item (`for s in producer_streams:`).
        Waiting on it may be waiting on the caller's stream, and a finding must not rest on
        it not being so (DESIGN.md: an unknown pair is never a finding by itself)."""
        if not isinstance(stream, cst.Name) or stream.value in self.live.streams:
            return False
        name = stream.value
        return name in self.anypath.loop_items or (name in self.caller.streams and name not in self.anypath.bound)

    def _collection_item(self, receiver: cst.BaseExpression) -> bool:
        """An item of a list or dict (`reqs[i - 1]`, a loop's `req`): waiting on it is waiting on
        an async collective's handle (events are named), launched on the stream current at
        entry after the work there so far."""
        return isinstance(receiver, cst.Subscript) or (
            isinstance(receiver, cst.Name) and receiver.value in self.anypath.loop_items
        )

    def _polled(self, test: cst.BaseExpression, *, outcome: bool) -> None:
        """Where `test` had the truth value `outcome`: what it says of names holds on the path
        (`_assume`); if it means `r.query()` returned True, the host is past r's work (DESIGN.md)."""
        self._assume(test, outcome)
        poll = query_poll(test)
        if poll is not None and poll[1] == outcome and self.state is not None:
            if dotted_name(poll[0]) not in self.live.tensors:
                self._host_waits(poll[0])

    def _host_waits(self, receiver: cst.BaseExpression) -> None:
        """The host waits for the stream or event `receiver` denotes (one name may be either)."""
        for token in (self._stream(receiver), self._event(receiver)):
            if token is not None:
                self._order(MarkUpdate(token, HOST))

    def _order(self, update: MarkUpdate) -> None:
        """Applies an ordering to every access; the tokens it depends on are worth probing."""
        self.tokens.update(token for token in (update.when, update.drop) if token is not None)
        when = update.when
        if when is not None and when != HOST and not is_event(when):
            # the stream's launches before the function (the caller's) are ordered too
            launch = Mark(LAUNCH_ACCESS, frozenset({when}))
            self.live.tensors.setdefault(launch_key(when), TrackedTensor(writes=frozenset({launch})))
        self.live.update_marks(update)

    def _waits_for_caller(self, waiter: str) -> None:
        """`waiter` is ordered after the caller's work before the call (not this function's):
        its accesses of the caller's tensors, and the functions this one calls after, see it."""
        self.anypath.waits_callers_event.add(waiter)
        key = probe_key(self.entry_stream)
        probe = self.live.tensors.get(key)
        if probe is not None:
            self.live.tensors[key] = probe.with_marks(
                lambda marks: frozenset(replace(mark, after=mark.after | {waiter}) for mark in marks)
            )

    def _record(self, token: str, stream: str) -> None:
        """Re-recording an event replaces what it captured."""
        self.records.add((token, stream))
        self._order(MarkUpdate(stream, token, drop=token))

    # ---- streams

    def _context_stream(self, expr: cst.BaseExpression) -> str | None:
        """The stream a `with` item makes current, None if it is no stream context: a context
        bound here (`ctx`, or `ctx()` of a `functools.partial`), or any spelling recognize.py knows."""
        key = dotted_name(expr.func if isinstance(expr, cst.Call) else expr)
        if key is not None and key in self.live.contexts:
            return self.live.contexts[key]
        functions = self.helpers.contexts if self.helpers is not None else NO_FUNCTIONS
        entered = entered_streams(expr, self.imports, functions, self.live.streams.__contains__)
        return None if entered is None else choice(map(self._stream, entered))

    def _event(self, expr: cst.BaseExpression) -> str | None:
        """The ordering token of the event an expression denotes; None for `None`."""
        name = self._stream(expr)
        return None if name is None else event_token(name)

    def _stream(self, expr: cst.BaseExpression) -> str | None:
        default = default_stream(self.function is not None, self.entry_stream, self._assumes)
        return stream_token(expr, self.imports, self.live.current, self.live.streams, default)

    def _with(self, node: cst.With) -> None:
        """`with s:` runs its body on stream `s` (one of unknown identity: not judged), `with
        torch.cuda.graph(g):` captures it, any other context manager runs it where it is."""
        stream: str | None = None
        graph: str | None = None
        for item in node.items:
            self.statement = item
            item_stream = self._context_stream(item.item)
            if item_stream is None:
                self._eval(item.item)
                if isinstance(item.item, cst.Call) and self.imports.qualified(item.item.func) == GRAPH_CAPTURE:
                    self._order(MarkUpdate(None, HOST))  # it synchronizes the device first
                    graph = dotted_name(item.item.args[0].value) if item.item.args else None
            else:
                stream = item_stream
        if graph is not None:
            self._capture(graph, node)
            return
        if stream is None or self.state is None:
            outer = self.state.current if self.state is not None else None
            self.run(body_of(node.body))
            if self.state is not None and outer is not None and is_exit_stack(node, self.imports):
                self.state.current = outer  # leaves what `enter_context` entered
            return
        if stream == UNKNOWN:
            self.silent += 1
            self.run(body_of(node.body))
            self.silent -= 1
            return
        outer_stream, outer_block = self.state.current, self.block
        entered = self._entered_is_a_stream(stream)
        self.state.current, self.block = stream, node
        self._made_current(stream)
        self.run(body_of(node.body))
        self.block = outer_block
        if self.state is not None:
            self.state.facts -= entered
            self.state.current = outer_stream


def callers_event(event: str, parameters: AbstractSet[str], records: AbstractSet[tuple[str, str]]) -> bool:
    """An event of the object's or a parameter that the function never records: recorded by the
    caller, or the method that produced its tensors, after its writes
    (`unrecorded-events-follow-callers-work`)."""
    given = root(event) == "self" or root(event) in parameters
    return given and is_event(event) and not any(recorded == event for recorded, _ in records)


def default_stream(in_function: bool, entry: str, assumes: Callable[[str], bool]) -> str:
    """What `default_stream()` denotes, for both interpreters: in a module body the current
    stream; in a function the stream current at its entry (`entry-stream-is-default`) unless a
    caller is seen to enter it on another, else a stream of its own."""
    if not in_function or (entry == CURRENT and assumes(ENTRY_STREAM_IS_DEFAULT)):
        return CURRENT
    return DEFAULT


def stream_token(
    expr: cst.BaseExpression,
    imports: ImportTable,
    current: str,
    bindings: Mapping[str, str],
    default: str = CURRENT,
) -> str | None:
    """The stream an expression denotes, for both interpreters: `current_stream()` is `current`,
    `default_stream()` is `default` (the stream current at entry, or DEFAULT where that may be
    a side stream), and so is a call of a function of the module that returns one, or a
    property's read; a name bound to a stream its binding, anything else its own source text;
    None for `None`."""
    if isinstance(expr, cst.Call) and (call := imports.stream_call(expr)) is not None:
        return current if call == CURRENT_STREAM else default
    if isinstance(expr, cst.Name) and expr.value == "None":
        return None
    key = dotted_name(expr)
    read = imports.stream_property(key) if key is not None else None
    if read is not None:  # `self.compute` of `@property def compute(self): return current_stream()`
        return current if read == CURRENT_STREAM else default
    if key is not None and key in bindings:
        return bindings[key]
    code = code_of(expr)
    if isinstance(expr, cst.Subscript) and code not in bindings:
        collection = dotted_name(expr.value)  # `streams[i % 2]` of `streams = [a, b]`: a or b
        if collection is not None and item_key(collection) in bindings:
            return bindings[item_key(collection)]
    return bindings.get(code, code)


def recorded_inline(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The stream of `r.record_event()` passed on as it is made; None for any other event."""
    if (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and api.method_op(expr.func.attr.value) == (api.RECORD, True)
    ):
        return expr.func.value
    return None


def _uncaptured(after: TrackedTensor, before: TrackedTensor | None, capturing: str) -> TrackedTensor:
    """A tensor's state after a capture: as before it, with the accesses made in the block on
    streams other than the capturing one, which ran."""
    before = before or TrackedTensor()
    ran_writes = frozenset(m for m in after.writes - before.writes if m.access.stream != capturing)
    ran_reads = frozenset(m for m in after.reads - before.reads if m.access.stream != capturing)
    return replace(after, writes=ran_writes or before.writes, reads=before.reads | ran_reads)
