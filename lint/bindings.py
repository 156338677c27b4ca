"""Bindings and lifetimes: what assigning, deleting and iterating does to the names the
stream-flow analysis tracks, and the checks made when a tensor's memory is released.

Part of `FunctionAnalysis` (lint/accesses.py); the methods it calls that are not here live in
the other parts (values, streams, effects, accesses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.tokens import UNKNOWN, choice, event_token, issued_on, item_key
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import Caller
from csan_lint.lint.containers import items_of, object_root, paired
from csan_lint.lint.effects import Helpers, probe_key
from csan_lint.lint.getters import getter_holder
from csan_lint.lint.kept import kept_items
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import literal_items
from csan_lint.lint.ordering import (
    Access,
    FlowState,
    Mark,
    MarkUpdate,
    Rebound,
    TrackedTensor,
    Unplaced,
    Within,
    launch_key,
)
from csan_lint.lint.pathfacts import (
    without,
)
from csan_lint.lint.values import Value, inplace_root, is_async_collective, is_reference, stores_in_container
from csan_lint.lint.views import viewed
from csan_lint.lint.vocabulary import GRADIENT


class Bindings:
    """The binding half of `FunctionAnalysis`."""

    anypath: AnyPath
    caller: Caller

    imports: ImportTable
    function: str | None
    helpers: Helpers | None
    maybe_tensors: set[str]
    """Names of unknown values that may be tensors: parameters and loop targets."""
    used_as_tensors: frozenset[str]
    state: FlowState | None
    live: FlowState
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _item_of_callers: Callable[[cst.BaseExpression], bool]
    _value: Callable[[cst.BaseExpression], Value]
    _assumed_result: Callable[[frozenset[str]], Value]
    _fresh: Callable[[cst.BaseExpression], bool]
    _moves_unplaced: Callable[[cst.Call], bool]
    _torch_operand: Callable[[cst.BaseExpression], bool]
    _stream: Callable[[cst.BaseExpression], str | None]
    _eval: Callable[[cst.CSTNode], None]
    _header: Callable[[cst.BaseExpression], None]
    _escape_names: Callable[[cst.CSTNode], None]
    _record: Callable[[str, str], None]
    _write_target: Callable[..., None]
    _make_access: Callable[..., Access]
    _launched_before: Callable[[str], frozenset[str]]
    _hazard: Callable[..., None]
    _bind_returned: Callable[[cst.BaseExpression, dict[int | None, Mark]], None]
    _unbind_host_items: Callable[[cst.BaseExpression, cst.BaseExpression], None]
    _release: Callable[..., None]
    _choose: Callable[[Sequence[cst.BaseExpression], cst.BaseExpression], bool]
    _stream_test_assignment: Callable[[Sequence[cst.BaseExpression], cst.BaseExpression], bool]
    _demote: Callable[..., None]
    silent: int
    entry_stream: str
    _is_stream: Callable[[cst.BaseExpression], bool]
    _order: Callable[[MarkUpdate], None]

    def _assign(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        if self._record_event_assignment(targets, value) or self._choose(targets, value):
            return
        if self._stream_test_assignment(targets, value):
            return
        pairs = paired(targets, value)
        if pairs is not None:  # `x, z = a, b`: each name gets its own value
            for _, element in pairs:
                self._eval_value(element)
            values = [(target, element, self._value(element)) for target, element in pairs]
            for target, element, element_value in values:
                self._bind(target, element_value)
                self._allocated(target, element)
            return
        self._eval_value(value)
        if isinstance(value, cst.Name) and value.value == "None":
            self.anypath.maybe_none.update(key for target in targets if (key := dotted_name(target)) is not None)
        if self._work_assignment(targets, value):
            return
        if (
            len(targets) == 1
            and (root := inplace_root(value)) is not None
            and dotted_name(root) == dotted_name(targets[0])
        ):
            return  # `x = x.sub_(m).div_(s)`: still the same tensor, written in place
        bound = self._value(value)
        held = items_of(value)  # `pending = [it for it in items if c]`, `rest = items[1:]`: the caller's
        if not isinstance(held, cst.Call) and object_root(held) in self.anypath.callers_objects:
            self.anypath.callers_objects.update(key for target in targets if (key := dotted_name(target)) is not None)
        for target in targets:
            self._bind(target, bound)
            self._allocated(target, value)
            kept_items(self.live.tensors, target, value)
            if isinstance(target, cst.Name) and self._item_of_callers(value):
                self.anypath.borrowed.add(target.value)
            elif isinstance(target, cst.Name) and (holder := self._holder(value)) is not None:
                tensor = self.live.tensors.get(target.value) or TrackedTensor()
                self.live.tensors[target.value] = replace(tensor, writes=frozenset())  # the caller wrote it
                self.anypath.borrowed.add(target.value)
                self.anypath.held_by[target.value] = holder
            key = dotted_name(target)
            aliased = bound.kind in ("alias", "other", "unknown")
            if aliased and key is not None and names_binding(value, self.imports, self.live.streams):
                stream = self._stream(value)  # `s = self.copy_stream`, `s = self.streams[i]`: that stream
                if stream is not None:
                    self.live.streams[key] = stream
        returned = self.anypath.returned_by.pop(id(value), {})
        if returned and bound.kind in ("result", "other", "unknown"):  # written where the callee made it
            for target in targets:
                self._bind_returned(target, returned)
        for target in targets:
            self._unbind_host_items(target, value)

    def _drops_gradient(self, target: cst.BaseExpression) -> bool:
        """`p.grad = v` (`None`, another tensor) drops the gradient `p` held."""
        return (
            isinstance(target, cst.Attribute)
            and target.attr.value == GRADIENT
            and self.helpers is not None
            and self.helpers.assumptions.holds(assumed.DROPPED_GRADIENTS_RELEASE)
        )

    def _rebound(self, key: str) -> None:
        """`key` gets a new value: nothing known of its old one holds."""
        if key in self.anypath.indexed_by:
            self.live.update_marks(Unplaced(key))
        if any(name == key or name.startswith(f"{key}.") for name in self.anypath.tested):
            self.live.facts = without(self.live.facts, key)
            self.live.update_marks(Rebound(key))

    def _eval_value(self, value: cst.BaseExpression) -> None:
        """A value bound to a name: naming a tensor, or a view of one, launches no kernel, nor
        does gathering them in a tuple, list, set or dict to keep (what computes an item does)."""
        items = literal_items(value)
        if items is not None:
            for item in items:
                self._eval_value(item)
        elif not is_reference(value) and viewed(value) is None:
            self._eval(value)

    def _work_assignment(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> bool:
        """`work = dist.all_reduce(t, async_op=True)`: the handle is an event recorded on the
        stream the collective was issued on; `work.wait()` makes the current stream wait for it."""
        if not (len(targets) == 1 and isinstance(value, cst.Call) and is_async_collective(self.imports, value)):
            return False
        key = dotted_name(targets[0])
        if key is None:
            return False
        self.maybe_tensors.discard(key)
        self._forget(key)
        self._record(event_token(key), self.live.current)
        return True

    def _bind(self, target: cst.BaseExpression, value: Value) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, value)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, value)
            return
        if isinstance(target, cst.Subscript) and (listed := dotted_name(target.value)) in self.anypath.lists:
            self._demote(listed, proven=True)  # an item of the list replaced: its items are no longer one
            return
        if (
            isinstance(target, cst.Subscript)
            and stores_in_container(target, value)
            and not self._torch_operand(target.value)  # a tensor a torch op made stays one
        ):
            if (container := dotted_name(target.value)) is not None:
                self._demote(container, proven=True)
            return
        if isinstance(target, cst.Subscript):
            self._write_target(target, assigned=True)
            return
        key = dotted_name(target)
        if key is None:
            return
        owned = isinstance(target, cst.Name)
        if value.kind == "alias" and value.source == key and key in self.live.tensors:
            self._view_of_itself(key, value)  # `x = x.view(...)`: the same memory, still in use
            return
        storage_of = rebound_storage(target)
        if storage_of is not None:  # the same tensor, still the caller's, now holding `value`'s memory
            key = storage_of
            keeps = value.moved_from is not None and value.moved_from.removesuffix(".data") == key
            assumes = (
                not keeps and self.helpers is not None and self.helpers.assumptions.holds(assumed.REBOUND_DATA_RELEASES)
            )
            unseen = self.entry_stream if assumes else None  # `p.data = p.data.to(d)` leaves no device memory
            self._release(key, target, unseen_alloc=unseen, assumption=assumed.REBOUND_DATA_RELEASES)
            if (pool := self._pool()) is not None and not self.silent:
                self.anypath.swapped_in.add(pool)
        else:
            self.anypath.bound.add(key)
            if value.listed:
                self.anypath.lists.add(key)
            else:
                self.anypath.lists.discard(key)
            self.anypath.borrowed.discard(key)
            self.anypath.held_by.pop(key, None)
            self.anypath.callers_items.discard(key)
            if self._drops_gradient(target):  # autograd allocated it on the stream current at entry
                self._release(key, target, unseen_alloc=self.entry_stream, assumption=assumed.DROPPED_GRADIENTS_RELEASE)
            else:
                self._release(key, target)  # of `self.x` too, where its allocating stream is known (streamflow.py)
        if owned:
            if value.kind != "alias":
                self.maybe_tensors.discard(key)  # a number, a container, a stream...: no tensor
        self._forget(key)
        state = self.live
        if value.kind == "unknown" and owned and key in self.used_as_tensors:
            value = self._assumed_result(frozenset({assumed.UNSEEN_RESULTS_ARE_TENSORS}))
        if value.kind in ("tensor", "result"):
            mark = Mark(self._make_access(target, write=True), issued_on(state.current), state.facts)
            state.tensors[key] = TrackedTensor(
                writes=frozenset({mark}),
                alloc=state.current if owned else None,
                unsure=value.kind == "result",
                assumed=value.assumed,
            )
        elif value.kind == "allocation":
            access = replace(self._make_access(target, write=True), produced="allocated")
            mark = Mark(access, self._launched_before(state.current), state.facts)
            callers = state.current == self.entry_stream and launch_key(state.current) not in state.tensors
            self.anypath.callers_blocks[target] = self.anypath.callers_blocks.get(target, True) and callers
            alloc = state.current if owned else None
            state.tensors[key] = TrackedTensor(writes=frozenset({mark}), alloc=alloc, assumed=value.assumed)
        elif value.kind == "host":
            state.tensors[key] = TrackedTensor(host=True)
        elif value.kind == "alias" and value.source in state.tensors:
            source = state.tensors[value.source].with_marks(Within(value.region, state.facts))
            state.tensors[key] = replace(source, uses=frozenset(), alloc=None, escaped=False)
        elif value.kind == "alias" and owned and value.source in self.maybe_tensors:
            self.maybe_tensors.add(key)
        elif value.kind == "stream":
            state.streams[key] = value.source or key
            if value.source is None:
                self.anypath.fresh_streams.add(key)
        elif value.kind == "streams":
            for index, item in enumerate(() if value.listed else value.items):
                state.streams[f"{key}[{index}]"] = item
            state.streams[item_key(key)] = choice(value.items) or UNKNOWN
        elif value.kind == "context" and value.source is not None:
            state.contexts[key] = value.source
        elif value.kind == "event":
            state.update_marks(MarkUpdate(None, None, drop=event_token(key)))

    def _holder(self, value: cst.BaseExpression) -> str | None:
        """The object whose state `value`, a getter's result, is (lint/getters.py): not a
        tensor the call certainly makes."""
        holder = getter_holder(value, self.caller.streams)
        return None if holder is None or self._fresh(value) else holder

    def _allocated(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`target` holds memory `value` certainly allocated on the current stream (a torch op,
        a tensor method): its pool, for a tensor handed to the caller (`_handed_back`), and the
        stream that allocated it (`made_on`), for a record_stream on that very stream."""
        key = dotted_name(target)
        if key is None:
            return
        fresh = self._fresh(value)
        for bound in [name for name in self.anypath.made_on if name == key or name.startswith(f"{key}.")]:
            del self.anypath.made_on[bound]  # rebinding `x` rebinds `x.data` too
            self.anypath.made_by_moves.discard(bound)
        if fresh:
            self.anypath.made_on[key] = self.live.current
            if isinstance(value, cst.Call) and self._moves_unplaced(value):
                self.anypath.made_by_moves.add(key)
        tensor = self.live.tensors.get(key)
        if tensor is not None and fresh:
            self.live.tensors[key] = replace(tensor, pool=self._pool())

    def _pool(self) -> str | None:
        """The stream that allocates here: None where it waited for the caller's stream in this
        function, since then each call orders it after what the caller did with the last
        call's tensors."""
        stream = self.live.current
        entry = self.live.tensors.get(probe_key(self.entry_stream))
        if stream == self.entry_stream or entry is not None and all(mark.orders(stream) for mark in entry.writes):
            return None
        return stream

    def _record_event_assignment(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> bool:
        """`e = s.record_event()`: a new event, recorded on `s` at once."""
        if not (
            len(targets) == 1
            and isinstance(value, cst.Call)
            and not value.args
            and isinstance(value.func, cst.Attribute)
            and api.method_op(value.func.attr.value) == (api.RECORD, True)
            and dotted_name(targets[0]) is not None
        ):
            return False
        key = dotted_name(targets[0])
        assert key is not None
        stream = self._stream(value.func.value)
        self._forget(key)
        if stream is not None:
            self._record(event_token(key), stream)
        return True

    def _view_of_itself(self, key: str, value: Value) -> None:
        """A name rebound to a view of what it held keeps that memory and its pending work: only
        the part it now names changes (`Within`)."""
        self.anypath.bound.add(key)
        self.live.tensors[key] = self.live.tensors[key].with_marks(Within(value.region, self.live.facts))

    def _forget(self, key: str) -> None:
        self._rebound(key)
        self.anypath.stream_tests.pop(key, None)
        self.live.tensors.pop(key, None)
        for name in [name for name in self.live.tensors if name.startswith(f"{key}[")]:
            del self.live.tensors[name]  # the items of a returned tuple (`_bind_returned`)
        for name in [name for name in self.live.streams if name == key or name.startswith(f"{key}[")]:
            del self.live.streams[name]
        self.live.contexts.pop(key, None)


def rebound_storage(target: cst.BaseExpression) -> str | None:
    """`x` for `x.data = v`: `x` stays the same tensor object (a parameter of its module, an
    item of the caller's list) and now holds `v`'s memory; its old memory is released."""
    if type(target) is cst.Attribute and target.attr.value == "data":
        return dotted_name(target.value)
    return None


def names_binding(value: cst.BaseExpression, imports: ImportTable, streams: Mapping[str, str]) -> bool:
    """`self.copy_stream`, or an item of a collection of streams (`self.streams[i]`): an
    expression a stream bound elsewhere may be read through."""
    if not isinstance(value, cst.Subscript):
        return dotted_name(value) is not None
    collection = dotted_name(value.value)
    return collection is not None and (imports.binds_streams(collection) or item_key(collection) in streams)
