"""Bindings and lifetimes: what assigning, deleting and iterating does to the names the
stream-flow analysis tracks, and the checks made when a tensor's memory is released.

Part of `FunctionAnalysis` (lint/accesses.py); the methods it calls that are not here live in
the other parts (values, streams, effects, accesses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.tokens import UNKNOWN, choice, distinct, event_token, is_named, issued_on, item_key
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.effects import Helpers, probe_key
from csan_lint.lint.getters import getter_holder
from csan_lint.lint.handover import handed_out, records, stash_dropped
from csan_lint.lint.kept import kept_items
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import literal_items
from csan_lint.lint.ordering import (
    Access,
    Assumed,
    FlowState,
    HazardKind,
    Mark,
    MarkUpdate,
    Rebound,
    TrackedTensor,
    Unplaced,
    Within,
    join_states,
    launch_key,
)
from csan_lint.lint.pathfacts import (
    NO_FACTS,
    Fact,
    Facts,
    conjuncts,
    equated,
    facts_of,
    host_resident,
    none_names,
    without,
)
from csan_lint.lint.values import (
    Value,
    inplace_root,
    is_async_collective,
    is_reference,
    paired,
    paired_containers,
    stores_in_container,
)
from csan_lint.lint.views import view_base, viewed


class Bindings:
    """The binding half of `FunctionAnalysis`."""

    anypath: AnyPath

    imports: ImportTable
    function: str | None
    helpers: Helpers | None
    maybe_tensors: set[str]
    """Names of unknown values that may be tensors: parameters and loop targets."""
    used_as_tensors: frozenset[str]
    caller_streams: frozenset[str]
    state: FlowState | None
    live: FlowState
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _value: Callable[[cst.BaseExpression], Value]
    _fresh: Callable[[cst.BaseExpression], bool]
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
        for target in targets:
            self._bind(target, bound)
            self._allocated(target, value)
            kept_items(self.live.tensors, target, value)
            if isinstance(target, cst.Subscript) and isinstance(value, (cst.Tuple, cst.List)):
                for item in value.elements:  # `self.c[k] = (t, event)`: the tuple keeps `t`
                    self._kept_for_caller(dotted_name(target.value) or "", dotted_name(item.value))
            if isinstance(target, cst.Name) and self._item_of_callers(value):
                self.anypath.borrowed.add(target.value)
            elif isinstance(target, cst.Name) and (holder := self._holder(value)) is not None:
                tensor = self.live.tensors.get(target.value) or TrackedTensor()
                self.live.tensors[target.value] = replace(tensor, writes=frozenset())  # the caller wrote it
                self.anypath.borrowed.add(target.value)
                self.anypath.held_by[target.value] = holder
            key = dotted_name(target)
            if bound.kind in ("alias", "other", "unknown") and key is not None and dotted_name(value) is not None:
                stream = self._stream(value)  # `s = self.copy_stream`: `s` names that stream if used as one
                if stream is not None:
                    self.live.streams[key] = stream
        returned = self.anypath.returned_by.pop(id(value), {})
        if returned and bound.kind in ("result", "other", "unknown"):  # written where the callee made it
            for target in targets:
                self._bind_returned(target, returned)

    def _choose(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> bool:
        """`s = a if c else b` picking a stream or a stream context by a test of a name: bound as
        `if c: s = a` / `else: s = b` would be, so an ordering of `a` made under `c` holds for `s`."""
        if not (isinstance(value, cst.IfExp) and facts_of(value.test, True) and self.state is not None):
            return False
        if self._value(value).kind not in ("stream", "context"):
            return False
        self._eval(value.test)
        entry, paths = self.state, []
        for side, outcome in ((value.body, True), (value.orelse, False)):
            self.state = entry.copy() if entry is not None else None
            self._assume(value.test, outcome)
            self._assign(targets, side)
            paths.append(self.state)
        self.state = join_states(paths)
        return True

    def _stream_test_assignment(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> bool:
        """`on_side = torch.cuda.current_stream() != s`: a bool, kept to tell `if on_side:`
        what it tests (`stream_tests`)."""
        if not (len(targets) == 1 and isinstance(targets[0], cst.Name)):
            return False
        compared = self._streams_equated(value)
        if compared is None:
            return False
        self._eval(value)
        self._bind(targets[0], Value("other"))
        self.anypath.stream_tests[targets[0].value] = compared
        return True

    def _streams_equated(self, test: cst.BaseExpression) -> tuple[str, str, bool] | None:
        """For a test of two streams' identity (`a == b`, `a is not b`, one of them known for a
        stream), their tokens and whether it holds where they are one stream."""
        compared = equated(test)
        if compared is None or not any(map(self._is_stream, compared[:2])):
            return None  # one known stream: the other side is one too where they are equal
        left, right = self._stream(compared[0]), self._stream(compared[1])
        return (left, right, compared[2]) if left is not None and right is not None else None

    def _same_streams(self, test: cst.BaseExpression, outcome: bool) -> None:
        """Where a test said two streams are one, work on either is ordered before later work on
        the other (`if current_stream() != s: s.wait_stream(current_stream())` waits exactly
        where it is needed). Made at the test: work launched afterwards is not ordered so."""
        name = dotted_name(test)
        compared = self.anypath.stream_tests.get(name) if name is not None else self._streams_equated(test)
        if compared is None or compared[2] != outcome or compared[0] == compared[1]:
            return
        self._order(MarkUpdate(compared[0], compared[1]))
        self._order(MarkUpdate(compared[1], compared[0]))

    def _assume(self, test: cst.BaseExpression, outcome: bool) -> None:
        """The path goes on where `test` had the truth value `outcome`: orderings held on what
        that implies now hold (lint/pathfacts.py). Not of a tensor written here (a value that
        may be one, only read, is taken for a number or a flag). A name that is None on the
        path holds no tensor there (`if x is not None: x.record_stream(s)` skips no use)."""
        if self.state is None:
            return
        for part, holds in conjuncts(test, outcome):
            self._same_streams(part, holds)
        tensors = self.live.tensors
        said = facts_of(test, outcome)
        for name in none_names(said) | host_resident(said):
            tensors.pop(name, None)
        facts = frozenset(fact for fact in said if fact.name not in tensors or not tensors[fact.name].writes)
        if facts <= self.live.facts:
            return
        self.anypath.tested.update(fact.name for fact in facts)
        self.live.facts |= facts
        self.live.update_marks(Assumed(self.live.facts))

    def _entered_is_a_stream(self, stream: str) -> Facts:
        """`with torch.cuda.stream(s):` runs its block on `s` only where `s` is not None
        (`stream(None)` changes nothing, and the block then runs in program order on the current
        stream): in the block, `s is not None` holds, and orderings made under that test hold
        (`if s is not None: s.wait_stream(...)`). The facts added, for `_left_stream` to take back."""
        if self.state is None or not is_named(stream):
            return NO_FACTS
        added = frozenset({Fact(stream, "not in", frozenset({None}))}) - self.live.facts
        if added:
            self.anypath.tested.add(stream)
            self.live.facts |= added
            self.live.update_marks(Assumed(self.live.facts))
        return added

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
        if isinstance(target, cst.Subscript) and value.kind == "alias":
            self._kept_for_caller(dotted_name(target.value) or "", value.source)
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
        storage_of = rebound_storage(target)
        if storage_of is not None:  # the same tensor, still the caller's, now holding `value`'s memory
            key = storage_of
            keeps = value.moved_from is not None and value.moved_from.removesuffix(".data") == key
            assumes = (
                not keeps and self.helpers is not None and self.helpers.assumptions.holds(assumed.REBOUND_DATA_RELEASES)
            )
            unseen = self.entry_stream if assumes else None  # `p.data = p.data.to(d)` leaves no device memory
            self._release(key, target, unseen_alloc=unseen)
            if (pool := self._pool()) is not None and not self.silent:
                self.anypath.swapped_in.add(pool)
        else:
            self.anypath.bound.add(key)
            self.anypath.borrowed.discard(key)
            self.anypath.held_by.pop(key, None)
            self.anypath.callers_items.discard(key)
            self._release(key, target)  # of `self.x` too, where its allocating stream is known (streamflow.py)
        if owned:
            if value.kind != "alias":
                self.maybe_tensors.discard(key)  # a number, a container, a stream...: no tensor
        self._forget(key)
        state = self.live
        if value.kind == "unknown" and owned and key in self.used_as_tensors:
            value = Value("result")
        if value.kind in ("tensor", "result"):
            mark = Mark(self._make_access(target, write=True), issued_on(state.current), state.facts)
            state.tensors[key] = TrackedTensor(
                writes=frozenset({mark}),
                alloc=state.current if owned else None,
                unsure=value.kind == "result",
            )
        elif value.kind == "allocation":
            access = replace(self._make_access(target, write=True), produced="allocated")
            mark = Mark(access, self._launched_before(state.current), state.facts)
            callers = state.current == self.entry_stream and launch_key(state.current) not in state.tensors
            self.anypath.callers_blocks[target] = self.anypath.callers_blocks.get(target, True) and callers
            state.tensors[key] = TrackedTensor(writes=frozenset({mark}), alloc=state.current if owned else None)
        elif value.kind == "host":
            state.tensors[key] = TrackedTensor()
        elif value.kind == "alias" and value.source in state.tensors:
            source = state.tensors[value.source].with_marks(Within(value.region, state.facts))
            state.tensors[key] = replace(source, uses=frozenset(), alloc=None, escaped=False)
        elif value.kind == "alias" and owned and value.source in self.maybe_tensors:
            self.maybe_tensors.add(key)
        elif value.kind == "stream":
            state.streams[key] = value.source or key
        elif value.kind == "streams":
            for index, item in enumerate(value.items):
                state.streams[f"{key}[{index}]"] = item
            state.streams[item_key(key)] = choice(value.items) or UNKNOWN
        elif value.kind == "context" and value.source is not None:
            state.contexts[key] = value.source
        elif value.kind == "event":
            state.update_marks(MarkUpdate(None, None, drop=event_token(key)))

    def _kept_for_caller(self, container: str, name: str | None) -> None:
        """`self.c[k] = t`, `self.c.append(t)`, `t` allocated here from a side stream's pool,
        and a method of the class hands the items of `self.c` to its caller with no
        `record_stream`: the caller uses and drops `t` on its own stream, and the side stream
        may reuse the block at once."""
        tensor = self.live.tensors.get(name) if name is not None else None
        owner = (self.function or "").rpartition(".")[0]
        if name is None or tensor is None or tensor.pool is None or self.silent or self.helpers is None or not owner:
            return
        if not self.helpers.assumptions.holds(assumed.CONTAINER_HANDOVER):
            return
        if not container.startswith("self.") or container.count(".") != 1:
            return
        if not distinct(tensor.pool, self.entry_stream) or self.entry_stream in tensor.recorded:
            return
        function = self.helpers.functions.get(self.function or "")
        if function is not None and records(function, name):
            return  # recorded after it is stored
        found: tuple[str, cst.CSTNode] | None = handed_out(
            owner, container, self.helpers.functions, self.helpers.classes
        )
        if found is None:  # returned here and kept in a stash the class drops (`del self.c[k]`)
            dropped = stash_dropped(self.function or "", name, container, self.helpers.functions, self.helpers.classes)
            found = (self.function or "", dropped) if dropped is not None else None
        if found is None:
            return
        method, node = found
        for mark in tensor.writes:
            access = replace(mark.access, stream=self.entry_stream, write=False)
            self._hazard(HazardKind.FREE_IN_USE, name, access, tensor.pool, node, returned=True, handed_by=method)

    def _item_of_callers(self, value: cst.BaseExpression) -> bool:
        """`self.buffers[k]`, `params[i]`: an item of a container the caller owns (for a function
        whose parameters are the caller's, `produced_by_caller`)."""
        if not isinstance(value, cst.Subscript):
            return False
        root = (dotted_name(value.value) or "").split(".", 1)[0]
        return root in self.caller_streams or root in ("self", "cls")

    def _holder(self, value: cst.BaseExpression) -> str | None:
        """The object whose state `value`, a getter's result, is (lint/getters.py): not a
        tensor the call certainly makes."""
        holder = getter_holder(value, self.caller_streams)
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
        if fresh:
            self.anypath.made_on[key] = self.live.current
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

    def _forget(self, key: str) -> None:
        self._rebound(key)
        self.anypath.stream_tests.pop(key, None)
        self.live.tensors.pop(key, None)
        for name in [name for name in self.live.tensors if name.startswith(f"{key}[")]:
            del self.live.tensors[name]  # the items of a returned tuple (`_bind_returned`)
        for name in [name for name in self.live.streams if name == key or name.startswith(f"{key}[")]:
            del self.live.streams[name]
        self.live.contexts.pop(key, None)

    def _delete(self, target: cst.BaseExpression, node: cst.Del) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._delete(element.value, node)
        elif isinstance(target, cst.Name):
            self._release(target.value, node)
            self._forget(target.value)
        elif isinstance(target, cst.Subscript):
            self._eval(target.value)
            for index in target.slice:
                self._eval(index)
        elif isinstance(target, cst.Attribute) and (key := dotted_name(target)) is not None:
            self._release(key, node)
            self._forget(key)

    # ---- lifetimes

    def _release(self, key: str, where: cst.CSTNode | None, unseen_alloc: str | None = None) -> None:
        """The name's last reference dies at `where`: its block goes back to its allocating
        stream's pool, and uses on other streams must be ordered before that stream's next
        allocation (`_reuse_released`), which may get it. `unseen_alloc`: the stream taken as
        the allocating one where the allocation is not seen (memory a `.data` rebinding drops,
        as `resize_(0)` frees it: `_free`); its uses are then all its accesses."""
        tensor = self.live.tensors.get(key)
        if tensor is None or tensor.escaped:
            return
        if tensor.alloc is None and unseen_alloc is not None:
            tensor = replace(tensor, alloc=unseen_alloc, uses=tensor.reads | tensor.writes, assumed_alloc=True)
        if tensor.alloc is None:
            return
        if any(_unprotected(use, tensor, tensor.alloc) for use in tensor.uses):
            self.live.released[key, where] = tensor

    def _reuse_released(self) -> None:
        """Released blocks may be handed out here: a use not ordered by now before the
        allocating stream (a wait since the release orders it) races the reuse."""
        released, self.live.released = self.live.released, {}
        for (key, where), tensor in released.items():
            assert tensor.alloc is not None  # only such tensors are released for judging
            for use in tensor.uses:
                if _unprotected(use, tensor, tensor.alloc):
                    rests = frozenset({assumed.REBOUND_DATA_RELEASES}) if tensor.assumed_alloc else frozenset()
                    self._hazard(HazardKind.FREE_IN_USE, key, use.access, tensor.alloc, where, rests_on=rests)

    def _free(self, key: str, where: cst.Call) -> None:
        """`x.untyped_storage().resize_(0)` frees the memory at once, whoever allocated it (when
        not seen here, the caller, on the stream current at entry): work still using it on
        another stream must be ordered before that stream or recorded."""
        tensor = self.live.tensors.get(key)
        if tensor is None:
            return
        alloc = tensor.alloc or self.entry_stream
        for use in tensor.uses if tensor.alloc else tensor.reads | tensor.writes:
            if _unprotected(use, tensor, alloc):
                self._hazard(HazardKind.FREE_IN_USE, key, use.access, alloc, where)

    def _release_all(self, where: cst.CSTNode | None) -> None:
        """The function returns: its locals die, and the caller may allocate at once."""
        if self.function is None:
            return  # module globals live until exit
        for key in list(self.live.tensors):
            if "." not in key:  # `self.x` outlives the call
                self._release(key, where)
        self._reuse_released()

    def _pass(self, expr: cst.BaseExpression, caller: str) -> None:
        """A value handed to the caller, who goes on on stream `caller`: it escapes, and is read
        only if computing it launches work."""
        self._eval_value(expr)
        self._handed_back(expr, caller)
        self._escape_names(expr)

    def _handed_back(self, expr: cst.BaseExpression, caller: str) -> None:
        """A tensor returned or yielded is used, then dropped, by the caller on `caller`: if its
        memory came from another stream's pool, that stream may reuse the block as soon as the
        caller drops it, while the caller's kernels still use it, unless `record_stream` told
        the allocator of the caller's stream; a view of it (`x[0]`, not `x.reshape(n)`, which may
        copy) hands the same block over. Not a tensor also stored elsewhere (escaped): the code
        that drops that reference decides when the block is free."""
        elements = [element.value for element in expr.elements] if isinstance(expr, (cst.Tuple, cst.List)) else [expr]
        handed: set[str] = set()
        for element in elements:
            base = view_base(element)  # a view hands over its base's block
            key = base.value if isinstance(base, cst.Name) else None  # `self.x` stays referenced
            tensor = self.live.tensors.get(key) if key is not None else None
            if self.silent or key is None or tensor is None or tensor.pool is None or tensor.escaped or key in handed:
                continue
            handed.add(key)
            if distinct(tensor.pool, caller) and caller not in tensor.recorded:
                access = replace(self._make_access(element, write=False), stream=caller)
                self._hazard(HazardKind.FREE_IN_USE, key, access, tensor.pool, None, returned=True)

    def _iterate(self, iterable: cst.BaseExpression) -> None:
        if not self._iterated_container(iterable):
            self._header(iterable)

    def _iterated_container(self, iterable: cst.BaseExpression) -> bool:
        """`for x in xs`: going through a list, or a tensor's rows (views), launches nothing, nor
        does pairing them up (`enumerate(xs)`, `zip(xs, ys)`); a value of unknown kind that is
        iterated is a container."""
        if isinstance(iterable, (cst.List, cst.Tuple)) and is_reference(iterable):
            return True  # `for t in [a, b]`: each item is used in the body
        if (paired := paired_containers(iterable)) is not None:
            return all([self._iterated_container(container) for container in paired])  # demotes each
        key = dotted_name(iterable)
        if key is None:
            return False
        self._demote(key)
        return True

    def _demote(self, key: str, *, proven: bool = False) -> None:
        """`key` is used as a container or a number: no tensor, unless a torch op made it
        (`proven`: a method tensors do not have was called on it)."""
        tensor = self.live.tensors.get(key)
        if tensor is None or tensor.unsure or proven:
            self.maybe_tensors.discard(key)
            if tensor is not None:
                self._forget(key)


def rebound_storage(target: cst.BaseExpression) -> str | None:
    """`x` for `x.data = v`: `x` stays the same tensor object (a parameter of its module, an
    item of the caller's list) and now holds `v`'s memory; its old memory is released."""
    if type(target) is cst.Attribute and target.attr.value == "data":
        return dotted_name(target.value)
    return None


def _unprotected(use: Mark, tensor: TrackedTensor, alloc: str) -> bool:
    """A use the allocator does not wait for when `tensor` is freed: on a stream distinct from
    `alloc`, neither recorded nor ordered before it. Of a stream chosen at run time, each choice
    on its own path (`s if c else current_stream()`: `s` is recorded where it is chosen)."""
    if use.access.stream in tensor.recorded:
        return False
    return use.unordered(alloc, distinct=lambda a, b: a not in tensor.recorded and distinct(a, b)) is not None
