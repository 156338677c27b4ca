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
A non-blocking copy to a device the code does not name is a download only where its result turns
out to be host memory (`pin_memory()` is called on it: lint/devices.py).
Precision over recall: a buffer counts as pinned only when this module pins it, and a call to a
same-module function that synchronizes anywhere in its body orders the host after everything. A
pending buffer given to a function of the module is read where its body reads that parameter;
given to code the analysis cannot see, under the assumption `unseen-callees-read-downloads`.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.assumptions import KINDS_FROM_NAMES, Assumptions
from csan_lint.lint.analysis.tokens import CURRENT, event_token
from csan_lint.lint.devices import Place, default_device, place_of_device, place_of_result
from csan_lint.lint.facts import HostHazard, ModuleFlow
from csan_lint.lint.hostcalls import LOOKS_ONLY, HostCalls
from csan_lint.lint.hostfacts import (
    Given,
    ModuleFacts,
    host_children,
    is_true,
    pins,
    scan_facts,
    target_keys,
    written_buffer,
)
from csan_lint.lint.hostorder import HostOrdering
from csan_lint.lint.hoststate import (
    Copy,
    HostState,
    Pending,
    forget_token,
    join_host_states,
)
from csan_lint.lint.interpret import OWN_RUN, Interpreter, Loop
from csan_lint.lint.model import Spellings
from csan_lint.lint.names import (
    DEVICE_SYNC,
    EVENT_CONSTRUCTORS,
    STREAM_VALUES,
    ImportTable,
    dotted_name,
)
from csan_lint.lint.nodes import literal_items
from csan_lint.lint.run_facts import ModuleFacts as ObservedFacts
from csan_lint.lint.streams import default_stream
from csan_lint.lint.values import is_host_test, is_reference
from csan_lint.lint.views import reads_an_item, returned_receiver, viewed
from csan_lint.runtime import kinds

_MAX_LOOP_PASSES = 6


class _Analysis(HostCalls, HostOrdering, Interpreter[HostState, Loop[HostState]]):
    """Interprets one function (or module) body."""

    max_passes = _MAX_LOOP_PASSES
    _join = staticmethod(join_host_states)

    def __init__(
        self,
        module: ModuleFacts,
        hazards: dict[tuple[str, cst.CSTNode], HostHazard],
        *,
        in_function: bool,
        carried: dict[str, frozenset[Pending]] | None = None,
        pending: str | None = None,
        function: cst.FunctionDef | None = None,
    ) -> None:
        self.default = default_stream(in_function, CURRENT, module.assumptions.holds)
        """What `default_stream()` denotes, as in streamflow (lint/streams.py)."""
        self.facts = module
        self.imports = module.imports
        self.hazards = hazards
        given = module.given(function) if function is not None else Given()
        self.observed_pinned, self.observed_download = given.pinned, given.download
        pinned = frozenset(module.pinned) | set(given.pinned)
        self.state = HostState(out_of=dict(carried or {}), pinned=pinned, on_host=given.host, true=given.true)
        if pending is not None:  # a callee's run: does it read this parameter on the host?
            self.state.into[pending] = frozenset({Pending(Copy(cst.Name(pending), CURRENT), frozenset({CURRENT}))})
        self.next_call = carried is not None
        """This run is the function called again: `carried` are the uploads its last call left running."""
        self.function, self.pending = function, pending
        self.role = "called again, meeting the uploads its last call left running" if self.next_call else OWN_RUN
        self.exits: list[HostState] = []
        self.returns_download = False
        """A `return` hands back host memory a non-blocking copy may still be writing."""
        self.statement = None
        self.loops = []

    # ---- statements

    def _small(self, node: cst.BaseSmallStatement) -> None:
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if node.value is not None:
                self._assign(targets, node.value)
        elif isinstance(node, cst.AugAssign):
            self._stored(node.value, node)
            self._host_write(node.target, node)
            self._eval(node.target)
        elif isinstance(node, cst.Expr):
            self._eval(node.value)
        elif isinstance(node, cst.Return):
            if node.value is not None:
                if self._pending_result(node.value):
                    self.returns_download = True
                    self._returned_to_unseen_callers(node)
                self._hand_off(node.value)
            if self.state is not None:
                self.exits.append(self.live.copy())
            self.state = None
        elif isinstance(node, cst.Raise):
            self.state = None
        elif isinstance(node, cst.Del):
            for name in target_keys(node.target):
                self.live.forget(name)
        elif isinstance(node, (cst.Break, cst.Continue)) and self.loops:
            loop = self.loops[-1]
            (loop.breaks if isinstance(node, cst.Break) else loop.continues).append(self.live)
            self.state = None
        elif isinstance(node, cst.Assert):
            self._eval(node.test)

    def _loop_frame(self, head: HostState) -> Loop[HostState]:
        return Loop()

    def _loop_target(self, target: cst.BaseAssignTargetExpression, iterable: cst.BaseExpression) -> None:
        for name in target_keys(target):
            self.live.forget(name)

    # ---- bindings

    def _assign(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        base = viewed(value) if not reads_an_item(value) else None  # `host[0]` reads an item
        source = dotted_name(base) if base is not None else None
        state = self.live
        if source is not None:  # `y = x`, `y = x.numpy()`: no read; `y` names what `x` names
            for target in targets:
                key = dotted_name(target)
                if key is None:
                    self._host_write(target, value)
                    continue
                self.live.forget(key)
                if source in state.into:
                    state.into[key] = state.into[source]
                if source in state.unplaced:
                    state.unplaced[key] = state.unplaced[source]
                storage = self.facts.attributes.storage(source)  # `h = self.part`: h holds part's base too
                if (uploads := next((state.out_of[s] for s in storage if s in state.out_of), None)) is not None:
                    state.out_of[key] = uploads
                if source in state.streams:
                    state.streams[key] = state.streams[source]
                if source in state.pinned:
                    state.pinned |= {key}
                if source in state.on_host:
                    state.on_host |= {key}
                if base is not value:
                    state.views[key] = state.views.get(source, source)
            return
        names = [dotted_name(target) for target in targets]
        if isinstance(value, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
            self._hand_off(value)  # packing values up is no read
        elif None in names:
            self._stored(value, value)
        else:
            self._eval(value)
        if self.state is None:
            return
        for target, key in zip(targets, names, strict=True):
            if key is None:
                self._host_write(target, value)
                continue
            self.live.forget(key)
            self._bind(key, value)

    def _bind(self, key: str, value: cst.BaseExpression) -> None:
        state = self.live
        if isinstance(value, cst.Subscript) and dotted_name(value.value) in state.pinned:
            state.pinned |= {key}
        if self._place(value) is Place.HOST:
            state.on_host |= {key}
        if is_true(value):
            state.true |= {key}
        value = returned_receiver(value)  # `x.to("cpu", non_blocking=True).requires_grad_()` is the copy
        if not isinstance(value, cst.Call):
            return
        qualified = self.imports.qualified(value.func)
        if qualified in EVENT_CONSTRUCTORS:
            state.unrecorded |= {key}
            forget_token(state.into, event_token(key))  # a new event orders nothing yet
            forget_token(state.unplaced, event_token(key))
            forget_token(state.out_of, event_token(key))
        elif self.imports.stream_call(value) is not None:
            state.streams[key] = self._stream(value) or key
        elif qualified not in STREAM_VALUES and (stream := self._context_stream(value)) is not None:
            state.contexts[key] = stream
        elif self.facts.pins and pins(value):
            state.pinned |= {key}
        if self._downloads(value) or self._returns_download(value):
            state.into[key] = frozenset({Pending(Copy(value, state.current), frozenset({state.current}))})
            state.pinned |= {key}
            return
        func = value.func
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if api.method_op(method) == (api.RECORD, True) and not value.args:  # `e = s.record_event()`
            stream = self._stream(func.value)
            if stream is not None:
                self._record(key, stream)
        elif self._copies_unplaced(value):
            state.unplaced[key] = frozenset({Pending(Copy(value, state.current), frozenset({state.current}))})

    def _forget(self, key: str) -> None:
        self.live.forget(key)

    # ---- where memory lives

    def _known(self, key: str) -> Place | None:
        return Place.HOST if key in self.live.on_host else None

    def _place(self, value: cst.BaseExpression) -> Place | None:
        """Where a bound value's memory lives (a device value: which one it names), if host
        on some path so far."""
        if isinstance(value, cst.Call) and self.imports.qualified(value.func) != "torch.device":
            return place_of_result(value, self.imports, self._known, default_device(self.facts.assumptions.holds))
        return place_of_device(value, self.imports, self._known)

    def _hand_off(self, expr: cst.BaseExpression) -> None:
        """A value given to code whose effect is unknown: not read here, no longer tracked."""
        key = dotted_name(expr)
        if key is not None:
            self.live.into.pop(key, None)
            self.live.unplaced.pop(key, None)
            self.live.out_of.pop(key, None)
            self.live.unrecorded -= {key}
        elif (items := literal_items(expr)) is not None:
            for item in items:
                self._hand_off(item)
        else:
            self._eval(expr)

    # ---- expressions

    def _eval(self, node: cst.CSTNode) -> None:
        if self.state is None:
            return
        if isinstance(node, (cst.Name, cst.Attribute)) and (key := dotted_name(node)) is not None:
            if isinstance(node, cst.Attribute) and node.attr.value in LOOKS_ONLY:
                return
            self._host_read(key, node)
            if isinstance(node, cst.Attribute):
                self._eval(node.value)
        elif isinstance(node, cst.Call):
            self._call(node)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return
        elif isinstance(node, cst.Attribute):
            if node.attr.value not in LOOKS_ONLY:
                self._eval(node.value)
        elif isinstance(node, cst.NamedExpr):
            self._assign([node.target], node.value)
        elif is_host_test(node):  # `x is not None`: compares Python objects, reads no data
            operands = (node.left, *(target.comparator for target in node.comparisons))
            for operand in (operand for operand in operands if not is_reference(operand)):
                self._eval(operand)
        else:
            for child in host_children(node):
                self._eval(child)

    # ---- host accesses

    def _host_read(self, key: str, node: cst.CSTNode, rests_on: frozenset[str] = frozenset()) -> None:
        pending = self.live.into.pop(key, None)
        if pending:
            copies = frozenset(p.copy for p in pending)
            self._hazard(kinds.HOST_READ_PENDING, node, buffer=key, copies=copies, rests_on=rests_on)

    def _host_write(self, target: cst.BaseExpression, node: cst.CSTNode) -> None:
        key = written_buffer(target)
        if key is None:
            self._eval(target)
            return
        if isinstance(target, cst.Subscript):
            for index in target.slice:
                self._eval(index)
        self._pending_write_check(key, node)
        self.live.into.pop(key, None)
        self.live.unplaced.pop(key, None)

    def _pending_write_check(self, key: str, node: cst.CSTNode, on: str | None = None) -> None:
        """A host write to `key`, or through `key` to the attribute it is a view of; `on`: made
        by a copy on that stream instead, after the uploads issued on it or ordered before it."""
        base = self.live.views.get(key)
        for storage in (*(() if base is None else (base,)), *self.facts.attributes.storage(key)):
            pending = self.live.out_of.pop(storage, None)
            if pending and on is not None:
                pending = frozenset(p for p in pending if on not in p.after)
            if pending:
                fields = {"buffer": storage} | ({"view": key} if key != storage else {})
                if self.next_call:
                    fields["previous_call"] = "yes"
                copies = frozenset(p.copy for p in pending)
                self._hazard(kinds.HOST_WRITE_PENDING, node, None, copies=copies, **fields)
                return

    def left_running(self, function: cst.FunctionDef) -> dict[str, frozenset[Pending]]:
        """The uploads out of buffers kept on `self` that may still run when the function
        returns: the next call of the function meets them, as a loop's next pass would. None if
        another function of the module synchronizes: it may run between the calls."""
        end = self._join([*self.exits, self.state])
        if end is None:
            return {}
        kept = self.facts.attributes.kept
        left = {key: p for key, p in end.out_of.items() if key.startswith("self.") and kept(key, function)}
        others = (name for name in self.facts.functions if name != function.name.value)
        return {} if left and any(map(self.facts.syncs, others)) else left

    def _hazard(
        self,
        kind: str,
        node: cst.CSTNode,
        span_node: cst.CSTNode | None = None,
        *,
        copies: frozenset[Copy] = frozenset(),
        rests_on: frozenset[str] = frozenset(),
        **fields: str,
    ) -> None:
        """Once per kind and node: loops revisit the same code."""
        span = span_node or self.statement or node
        assumed, observed = self._copies_rest_on(copies)
        hazard = HostHazard(kind, node, span, tuple(sorted(fields.items())), copies, rests_on | assumed, observed)
        self.hazards.setdefault((kind, node), hazard)

    def _run_for_return(self, function: cst.FunctionDef) -> bool:
        analysis = _Analysis(self.facts, {}, in_function=True, function=function)
        analysis.run(function.body.body)
        return analysis.returns_download

    def _callee_reads(self, function: cst.FunctionDef, parameter: str) -> frozenset[str] | None:
        """Run a callee with `parameter` host memory a download may still be writing: what its
        reading that on the host rests on, None if it does not."""
        hazards: dict[tuple[str, cst.CSTNode], HostHazard] = {}
        _Analysis(self.facts, hazards, in_function=True, pending=parameter, function=function).run(function.body.body)
        reads = (h for h in hazards.values() if h.kind == kinds.HOST_READ_PENDING and ("buffer", parameter) in h.fields)
        return next((hazard.assumptions for hazard in reads), None)


_SYNCS = frozenset({api.operation(DEVICE_SYNC), api.SYNC_RECEIVER})
"""What `ModuleFacts.syncs` looks for: a module that performs neither has no function that syncs."""
_STARTS = (Kind.EVENT_CREATE, Kind.CAPTURE, Kind.CAPTURE_BEGIN)
"""What the host analysis follows, with non-blocking copies: a module without any has no host hazard."""


def _host_hazards(
    module: cst.Module,
    spellings: Spellings,
    pins: bool,
    syncing: bool,
    assumptions: Assumptions,
    observed: ObservedFacts,
) -> tuple[HostHazard, ...]:
    facts = ModuleFacts(
        ImportTable(spellings, kinds_from_names=assumptions.holds(KINDS_FROM_NAMES)),
        pins=pins,
        syncing=syncing,
        assumptions=assumptions,
        module=module,
        observed=observed,
    )
    scan_facts(module.body, facts)
    if not facts.imports.imports_torch:
        return ()
    facts.pinned |= facts.attributes.views_of(facts.pinned)
    hazards: dict[tuple[str, cst.CSTNode], HostHazard] = {}
    _Analysis(facts, hazards, in_function=False).run(module.body)
    for functions in facts.functions.values():
        for function in functions:
            analysis = _Analysis(facts, hazards, in_function=True, function=function)
            analysis.run(function.body.body)
            if carried := analysis.left_running(function):  # hazards found before are kept as they are
                _Analysis(facts, hazards, in_function=True, carried=carried, function=function).run(function.body.body)
    return tuple(hazards.values())


def host_hazards(flow: ModuleFlow) -> tuple[HostHazard, ...]:
    """Every host-side hazard of the module, for `ModuleFlow.host_hazards` (lint/analysis/driver.py).
    Most modules are skipped without a walk: they make no event, capture no graph and copy
    nothing non-blocking (`flow.uses`, the module's resolved calls)."""
    uses = flow.uses
    if not (uses.performs(*_STARTS) or uses.non_blocking):
        return ()
    syncing = bool(_SYNCS & uses.ops)
    return _host_hazards(flow.module, flow.spellings, uses.pins, syncing, flow.assumptions, flow.observed)
