"""Returns: what a function hands back to its caller. The value returned (for the function's
summary, lint/effects.py, and the caller's names for it), and the side-stream work still
pending on the caller's tensors when it returns.

Part of `FunctionAnalysis` (lint/accesses.py); the methods it calls that are not here live in
the other parts (bindings, values, accesses).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS
from csan_lint.lint.analysis.tokens import (
    CURRENT,
    DEFAULT,
    alternatives,
    distinct,
    event_token,
    is_event,
    is_local,
    issued_on,
    item_key,
    root,
)
from csan_lint.lint.annotations import streams_annotation, tensor_annotation
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import NO_SITE, Caller, CallersJoin, CallSite
from csan_lint.lint.effects import Helpers, renamed
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import descendants, parameters
from csan_lint.lint.ordering import Access, FlowState, HazardKind, Mark, Produced, TrackedTensor
from csan_lint.lint.run_facts import NO_MODULE_FACTS
from csan_lint.lint.scan import kept_tensor_params, used_as_tensors
from csan_lint.lint.streams import stream_token
from csan_lint.lint.summaries import returned_key, returned_position
from csan_lint.lint.values import Value, called_or_named

_NOT_TENSORS = ("stream", "context", "event", "host")
"""Kinds of values a call may return that are never tensors."""


class Returns:
    """The return half of `FunctionAnalysis`."""

    anypath: AnyPath
    caller: Caller

    imports: ImportTable
    function: str | None
    helpers: Helpers | None
    maybe_tensors: set[str]
    used_as_tensors: frozenset[str]
    live: FlowState
    silent: int
    entry_stream: str
    records: set[tuple[str, str]]
    exits: list[FlowState]
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _value: Callable[[cst.BaseExpression], Value]
    _fresh: Callable[[cst.BaseExpression], bool]
    _make_access: Callable[..., Access]
    _hazard: Callable[..., None]
    _release_all: Callable[[cst.CSTNode | None], None]
    _handed_back_through: Callable[[str], None]

    def produced_by_caller(
        self,
        function: cst.FunctionDef,
        callers: CallersJoin,
        written_on: str = CURRENT,
        site: CallSite = NO_SITE,
        entered_on: str = CURRENT,
    ) -> None:
        """The parameters are the caller's. Those annotated as tensors were written by it before
        the call, on `written_on` (an unannotated one may be anything: ready; so is one every
        caller gives a value it holds no write of, `site.unwritten`), ordered before the streams
        every caller made wait for it first (`site.ordered`), or on `entered_on` where every caller
        wrote it on the stream current at the call (`site.on_entry`), and side-stream work on
        them still pending at return is left to it where every caller in the module joins that
        stream itself (`callers`)."""
        params = parameters(function)
        owned = frozenset(self.maybe_tensors)
        self.anypath.callers_objects.update(p.name.value for p in params if p.name.value not in ("self", "cls"))
        observed = self.helpers.observed if self.helpers is not None else NO_MODULE_FACTS
        kept = kept_tensor_params(function) | observed.kept_by_caller(self.function)
        self.caller = Caller(
            owned=owned,
            kept=kept & owned,
            annotated=frozenset(
                param.name.value
                for param in params
                if param.annotation is not None and tensor_annotation(param.annotation.annotation)
            ),
            streams=frozenset(param.name.value for param in params),
            orders_after_default=_waits_on_default(function, self.imports),
            join=callers,
            ordered=site.ordered,
        )
        for param in params:  # `streams: list[Stream]`: `streams[i]` is one of its items
            if param.annotation is not None and streams_annotation(param.annotation.annotation):
                self.live.streams[item_key(param.name.value)] = item_key(param.name.value)
        for name in site.contexts:  # `with ctx:` enters the stream of the context a call gave
            self.live.contexts[name] = f"{name}.stream"
        unannotated = self._assumes(assumed.UNANNOTATED_PARAMETERS_WRITTEN_BY_CALLER)
        used = used_as_tensors(function.body, self.imports) if unannotated else frozenset()
        for param in params:
            name = param.name.value
            if name in self.maybe_tensors and name not in site.unwritten and self._assumes_written(param, used):
                stream = entered_on if name in site.on_entry else written_on
                access = Access(param.name, stream, True, function, self.function, "by the caller")
                self.live.tensors[name] = TrackedTensor(
                    writes=frozenset({Mark(access, issued_on(stream) | site.ordered)}), unsure=True
                )

    def _assumes_written(self, param: cst.Param, used: frozenset[str]) -> bool:
        """Whether the parameter (that may be a tensor) is taken as written by the caller, by
        the assumption its annotation, or lack of one, falls under (`used`: the names the body
        uses as tensors, computed only when unannotated parameters may be taken so)."""
        if self._observed_written(param.name.value):
            return True
        annotation = param.annotation
        if annotation is not None:
            return tensor_annotation(annotation.annotation) and self._assumes(
                assumed.ANNOTATED_PARAMETERS_WRITTEN_BY_CALLER
            )
        return param.name.value in used

    def _rests_on(self, tensor: str, produced: Produced) -> frozenset[str]:
        """The assumptions a hazard of this function takes for granted: the producer of a value
        written by the caller, the stream the function is entered on, a hand-over through `self`."""
        rests: set[str] = set()
        if self._observed_written(tensor):
            pass  # a run saw it: no assumption (`ModuleFlow.location` lists the fact)
        elif produced == "by the caller" and tensor in self.anypath.read_on_fresh:
            rests.add(self.anypath.read_on_fresh[tensor])
        elif produced == "by the caller" and "." in tensor and not self.caller.orders_after_default:
            rests.add(assumed.ATTRIBUTES_WRITTEN_BY_CALLER)
        elif produced == "by the caller" and "." not in tensor:
            annotated = tensor in self.caller.annotated
            rests.add(
                assumed.ANNOTATED_PARAMETERS_WRITTEN_BY_CALLER
                if annotated
                else assumed.UNANNOTATED_PARAMETERS_WRITTEN_BY_CALLER
            )
        if self.entry_stream != CURRENT:
            rests.add(assumed.ENTRY_STREAM_FROM_CALLS)
        if tensor in self.anypath.lists:
            rests.add(assumed.COMPREHENDED_LISTS_ARE_TENSORS)
        return frozenset(rests)

    def _observed_written(self, name: str) -> bool:
        """Whether a test run saw the parameter (or a parameter's `.grad`) come written on the
        device by the caller (lint/run_facts.py): then no assumption is needed to take it as
        the caller's work."""
        observed = self.helpers.observed if self.helpers is not None else NO_MODULE_FACTS
        return observed.written_argument(self.function, name) is not None

    def _assumes(self, name: str) -> bool:
        return (self.helpers.assumptions if self.helpers is not None else DEFAULT_ASSUMPTIONS).holds(name)

    def _note_returned(self, value: cst.BaseExpression) -> list[tuple[int | None, cst.BaseExpression, Mark]]:
        """What a `return` hands back, for the function's summary: a returned tensor's last
        writes (also an item of a returned pair, `out[0]`), or a value computed at the return
        (`cast(T, self.model(x))`), written there; a result of unknown code is a tensor where
        the caller uses it as one (`unsure`); an event returned beside it, by its position;
        and whether it is memory allocated here, on which tests of parameters against `None`.
        Each write with its position and expression."""
        if self._allocates(value):
            self.anypath.allocated_returns.add(
                frozenset(fact.name for fact in self.live.facts if fact.kind == "in" and fact.values == {None})
            )
        listed = isinstance(value, (cst.Tuple, cst.List))
        elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        noted: list[tuple[int | None, cst.BaseExpression, Mark]] = []
        for index, element in enumerate(elements) if not self.silent else ():
            position = index if listed else None
            if isinstance(element, cst.Call) and self.imports.qualified(element.func) == "typing.cast":
                element = element.args[-1].value  # `cast(T, x)` is `x`
            tensor = self.live.tensors.get(tracked_key(element) or "")
            if tensor is not None:
                noted.extend((position, element, mark) for mark in tensor.writes)
            elif isinstance(element, cst.Call) and self._value(element).kind not in _NOT_TENSORS:
                mark = Mark(self._make_access(element, write=True), issued_on(self.live.current))
                noted.append((position, element, mark))
        names = enumerate(map(dotted_name, elements)) if listed else ()  # `return out, done`: done is <return>[1]
        handed = {event_token(name): event_token(returned_key(index)) for index, name in names if name is not None}
        self.anypath.returned.update((position, renamed(mark, handed)) for position, _, mark in noted)
        return noted

    def _allocates(self, value: cst.BaseExpression) -> bool:
        """`value` is memory certainly allocated here on the stream current at the call."""
        if self.silent or self.live.current != CURRENT:
            return False
        key = dotted_name(value) if isinstance(value, cst.Name) else None
        return self.anypath.made_on.get(key) == CURRENT if key is not None else self._fresh(value)

    def _return(self, node: cst.Return | None) -> None:
        """The caller continues from here: tensors die, and work still pending on a side stream
        on the caller's tensors (`caller.owned`) is left to a caller that knows of no stream or
        event to join it with: unless anything but tensors is returned (an event, a stream, a
        future or an object that may hold one), or the stream is recorded, on some path, in an
        event the caller can reach (`self.done`, a parameter)."""
        value = node.value if node is not None else None
        self._handed_back_through(self.entry_stream)
        noted = self._note_returned(value) if value is not None else []
        handed_back = value is not None and any(self._may_hold_work(key) for key in called_or_named(value))
        callers = (self.caller.owned - self.anypath.bound) | self.anypath.borrowed
        if node is not None and value is not None and not self._waitable_handed_back(value):
            self._unjoined_results([item for item in noted if tracked_key(item[1]) not in callers], node)
        for key in sorted(callers) if not handed_back else ():
            tensor = self.live.tensors.get(key)
            if tensor is None:
                continue
            pending_writes = [mark for mark in tensor.writes if self._pending_at_return(mark, self.entry_stream)]
            for mark in pending_writes:
                produced = mark.access.produced if mark.access.produced == "moved" else "written"
                self._hazard(
                    HazardKind.READ_AFTER_WRITE,
                    key,
                    mark.access,
                    mark.access.stream,
                    node,
                    returned=True,
                    produced=produced,
                )
            for mark in (
                tensor.reads if not pending_writes and key in self.caller.kept else ()
            ):  # the caller's next write
                if self._pending_at_return(mark, self.entry_stream):
                    self._hazard(HazardKind.WRITE_AFTER_READ, key, mark.access, mark.access.stream, node, returned=True)
        for key in sorted(self.anypath.callers_items - self.anypath.recorded_somewhere) if not handed_back else ():
            tensor = self.live.tensors.get(key)
            for mark in tensor.writes if tensor is not None else ():  # read only: may be kept (`caller.kept`)
                if self._pending_at_return(mark, CURRENT):  # allocated outside any block, also when entered on one
                    self._hazard(HazardKind.FREE_IN_USE, key, mark.access, CURRENT, node, dropped=True)
        self.exits.append(self.live.copy())
        self._release_all(None)

    def _unjoined_results(self, noted: list[tuple[int | None, cst.BaseExpression, Mark]], node: cst.Return) -> None:
        """A tensor handed back still being written on a side stream, with nothing to wait on
        handed back with it: the caller's stream will use it before that work is done. Not
        where the module's callers get it through the function's summary (they judge their
        own use of it) or every one of them joins the stream; nor joined into the default
        stream: that join is reported at the wait (lint/defaultjoin.py)."""
        for position, element, mark in noted if self._called_by_code() else ():
            stream = mark.access.stream
            if (
                not self._pending_at_return(mark, self.entry_stream)
                or mark.orders(DEFAULT)
                or not all(map(self._known_stream, alternatives(stream)))
                or self._followed(position)
            ):
                continue
            access = Access(element, self.entry_stream, False, node, self.function)
            tensor = tracked_key(element) or cst.Module([]).code_for_node(element)
            self._hazard(HazardKind.READ_AFTER_WRITE, tensor, access, stream, node, returned=True)

    def _known_stream(self, token: str) -> bool:
        """A stream of known identity: a local name bound to a stream here, or an attribute
        (`self.side`, `stage.stream`), a global or a token of the analysis; not a local bound to
        a value it cannot tell (`s = self.side if c else self.compute`), which may be the
        caller's own stream (an unknown pair is no finding by itself)."""
        return (
            not is_local(token)
            or token in self.live.streams
            or (self.helpers is not None and token in self.helpers.globals)
        )

    def _called_by_code(self) -> bool:
        """A module-level function or a method, whose caller uses what it returns; not a
        function nested in another, handed as a callback (a hook) to code that keeps it."""
        owner = (self.function or "").rpartition(".")[0]
        return self.function is not None and (not owner or (self.helpers is not None and owner in self.helpers.classes))

    def _followed(self, position: int | None) -> bool:
        """The callers in the module start from this returned value through the summary."""
        if self.helpers is None or self.function is None or not self.caller.join.called():
            return False
        summary = self.helpers.summary(self.function)
        return summary is not None and any(
            returned_position(effect.key) in (position, None) for effect in summary.returned
        )

    def _may_hold_work(self, key: str) -> bool:
        """Whether a returned name may give the caller a way to join the side-stream work: not
        a tensor, and not a local bound, and left untouched, before any of that work was
        launched (`loss = closure()` at an optimizer step's start holds none of it)."""
        if key in self.live.tensors:
            return False
        if key in self.live.streams:
            return True  # the stream itself: the caller can wait on it
        return not (is_local(key) and key in self.anypath.bound and key not in self.anypath.touched_after_work)

    def _waitable_handed_back(self, value: cst.BaseExpression) -> bool:
        """The return hands back more than tensors: an event, a stream, an object that may hold
        one, which the caller can wait on (`return out, event`); `None` and literals are no such
        thing."""
        elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
        for element in elements:
            if tracked_key(element) in self.live.tensors or _nothing_to_wait_on(element):
                continue
            if isinstance(element, cst.Call) and self._value(element).kind not in _NOT_TENSORS:
                continue
            return True
        return False

    def _pending_at_return(self, mark: Mark, caller: str) -> bool:
        """An access on a side stream the caller does not know of, not joined into `caller`'s
        stream (the one it continues on, or the one that allocated its items), and not recorded
        in an event the caller can reach."""
        stream = mark.access.stream
        return (
            distinct(stream, caller)
            and not mark.orders(caller)
            and stream not in self.caller.streams
            and not set(alternatives(stream)) - {CURRENT} <= self.anypath.joined_at_entry
            and not all(map(self.caller.join, set(alternatives(stream)) - {CURRENT}))
            and not any(on == stream and self._reachable_event(event) for event, on in self.records)
        )

    def _reachable_event(self, token: str) -> bool:
        """An event the caller holds too: stored on `self`, or passed in (also an item of
        what was: `state["done"][i]`)."""
        first = root(token)
        return is_event(token) and (first in ("self", "cls") or first in self.caller.streams)


def tracked_key(expr: cst.BaseExpression) -> str | None:
    """The state key of a returned expression: `a.b`, or `pair[0]` for an item of a returned
    tuple picked by a literal index."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
            root = dotted_name(expr.value)
            return f"{root}[{index.value.value}]" if root is not None else None
    return dotted_name(expr)


_LITERALS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _nothing_to_wait_on(expr: cst.BaseExpression) -> bool:
    """`None`, `True`, a number or a string: handed back beside a tensor, no event or stream."""
    return isinstance(expr, _LITERALS) or (isinstance(expr, cst.Name) and expr.value in ("None", "True", "False"))


def _waits_on_default(function: cst.FunctionDef, imports: ImportTable) -> bool:
    """Whether `function` makes a stream wait on `default_stream()` (`s.wait_stream(default_stream())`)."""
    return any(
        type(node) is cst.Call  # `type() is`, as in the other hot walks: most nodes are no call
        and isinstance(node.func, cst.Attribute)
        and api.method_op(node.func.attr.value)[0] == api.WAIT_STREAM
        and len(node.args) == 1
        and stream_token(node.args[0].value, imports, CURRENT, {}, DEFAULT) == DEFAULT
        for node in descendants(function.body)
    )
