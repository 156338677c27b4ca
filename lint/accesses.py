"""The stream-flow interpreter: follows the current CUDA stream through one function and
records every read and write of a tracked tensor, reporting the unordered cross-stream ones.

`FunctionAnalysis` is assembled from its parts: statements and accesses here (each checked by
lint/conflicts.py); expressions (lint/expressions.py); calls (lint/calls.py); bindings
(lint/bindings.py), what tests on the path tell (lint/pathtests.py) and lifetimes
(lint/lifetimes.py); what a return hands back
(lint/returns.py); values (lint/values.py, on the names of lint/vocabulary.py); streams,
stream contexts and orderings (lint/streams.py); calls through summaries (lint/effects.py); on
the shared control-flow driver (lint/interpret.py) and the ordering model (lint/ordering.py),
with what the function does on any path kept apart (lint/anypath.py). Blocks on a stream that differs
between paths are not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.tokens import CURRENT, HOST, alternatives, issued_on
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.bindings import Bindings
from csan_lint.lint.callers import NO_CALLER, CallSite
from csan_lint.lint.calls import Calls
from csan_lint.lint.conflicts import conflicts, with_access
from csan_lint.lint.containers import iterated_items, loop_tensors, object_root
from csan_lint.lint.defaultjoin import DefaultJoins
from csan_lint.lint.effects import PROBE_ACCESS, Effects, Helpers, probe_key
from csan_lint.lint.expressions import Expressions
from csan_lint.lint.interpret import Interpreter
from csan_lint.lint.kept import bind_kept_items
from csan_lint.lint.lifetimes import Lifetimes
from csan_lint.lint.modules import ModuleMoves, moved_module
from csan_lint.lint.modulestate import state_items
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import names_outside_returns, target_names
from csan_lint.lint.numbers import used_as_numbers
from csan_lint.lint.ordering import (
    LAUNCH_ACCESS,
    LAUNCHES,
    Access,
    FlowLoop,
    FlowState,
    Hazard,
    HazardKind,
    Mark,
    MarkUpdate,
    Produced,
    TrackedTensor,
    join_states,
    launch_key,
)
from csan_lint.lint.pathfacts import contradicts
from csan_lint.lint.pathtests import PathTests
from csan_lint.lint.regions import Region, region_names
from csan_lint.lint.returns import Returns
from csan_lint.lint.scan import body_of, used_as_tensors
from csan_lint.lint.streams import Streams
from csan_lint.lint.values import Value, Values
from csan_lint.lint.vocabulary import (
    ORDERING_METHODS,
)

_MAX_LOOP_PASSES = 8


class FunctionAnalysis(
    Expressions,
    Calls,
    Bindings,
    PathTests,
    Lifetimes,
    Returns,
    Values,
    Streams,
    DefaultJoins,
    Effects,
    ModuleMoves,
    Interpreter[FlowState, FlowLoop],
):
    """Interprets one function body (or a module body) and collects its hazards."""

    max_passes = _MAX_LOOP_PASSES
    _join = staticmethod(join_states)

    def __init__(
        self,
        imports: ImportTable,
        hazards: dict[tuple[object, ...], Hazard],
        *,
        function: str | None,
        params: frozenset[str] = frozenset(),
        helpers: Helpers | None = None,
        entry: Mapping[str, TrackedTensor] | None = None,
        probes: Iterable[str] = (),
    ) -> None:
        self.imports = imports
        self.hazards = hazards
        self.function = function
        self.helpers = helpers
        self.maybe_tensors = set(params)
        """Names of unknown values that may be tensors: parameters and loop targets."""
        self.used_as_tensors: frozenset[str] = frozenset()
        self.caller = NO_CALLER
        self.orders_at_calls: dict[str, dict[cst.Call, CallSite]] | None = None
        """Where to note what this function ordered before each call of the module's own (None:
        not noted; a summary's analysis, lint/effects.py)."""
        """What the function takes of its caller (`produced_by_caller`)."""
        self.anypath = AnyPath()
        """What the function does on any path, for its returns and its summary."""
        self.state = FlowState(tensors=dict(entry or {}))
        for token in probes:
            self.live.tensors[probe_key(token)] = TrackedTensor(
                writes=frozenset({Mark(PROBE_ACCESS, frozenset({token}))})
            )
        self.exits: list[FlowState] = []
        """The states at each `return` and at the end of the body: what a caller continues from."""
        self.records: set[tuple[str, str]] = set()
        self.tokens: set[str] = set()
        """Streams and events the ordering calls named: a summary probes each of them."""
        self.modules = set()
        self.items_of = {}
        self.yields = False
        self.silent = 0
        """Depth of blocks on an UNKNOWN stream: their accesses are taken as ordered, never judged."""
        self.block: cst.With | None = None
        self.graphs: dict[str, tuple[set[str], set[str]]] = {}
        self.captures: list[tuple[str, set[str], set[str]]] = []
        """The graph captures under way: each one's stream, and the keys it read and wrote there."""
        self.statement = None
        self.loops = []
        self.entry_stream = CURRENT
        """The caller's stream, which it continues on after a `return`."""
        self.kept_defaults = frozenset()
        self.default_joins = {}
        self.runs_on_default = False

    # ---- driver

    def _statement(self, node: cst.BaseStatement | cst.BaseSmallStatement) -> None:
        """Blocks released before a statement that may allocate are judged there (`_reuse_released`):
        waits and syncs right after a release still order their reuse."""
        if self.state is not None and self.live.released and not _allocates_nothing(node):
            self._reuse_released()
        if self.state is not None and self._side_work_pending():
            self.anypath.touched_after_work.update(names_outside_returns(node))
        super()._statement(node)

    def _side_work_pending(self) -> bool:
        """Whether this path launched work on a stream other than the entry stream."""
        entry = launch_key(self.entry_stream)
        return any(key.startswith(LAUNCHES) and key != entry for key in self.live.tensors)

    def run_function(self, body: cst.BaseSuite) -> None:
        self.entry_stream = self.live.current
        self.used_as_tensors = used_as_tensors(body, self.imports)
        if self.maybe_tensors - self.used_as_tensors:  # parameters of unknown kind, some used as numbers?
            self.maybe_tensors -= used_as_numbers(body) - self.used_as_tensors
        entry = frozenset({Mark(PROBE_ACCESS, frozenset({self.entry_stream}))})
        self.live.tensors.setdefault(probe_key(self.entry_stream), TrackedTensor(writes=entry))
        self.run(body_of(body))
        if self.state is not None:
            self._return(None)
        self._judge_default_joins()
        self._judge_records_on_pool()

    def _small(self, node: cst.BaseSmallStatement) -> None:
        if isinstance(node, cst.Assign):
            self._assign([target.target for target in node.targets], node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self._assign([node.target], node.value)
        elif isinstance(node, cst.AugAssign):
            self._eval(node.value)
            key = dotted_name(node.target)
            if key is not None:
                self._rebound(key)
            if key is not None and (key in self.live.tensors or key in self.maybe_tensors):
                self._access(key, node.target, write=True)
            else:
                self._eval(node.target)
        elif isinstance(node, cst.Expr) and (module := moved_module(node.value)) is not None:
            self._move(module, node.value)
        elif isinstance(node, cst.Expr):
            self._eval(node.value)
        elif isinstance(node, cst.Return):
            if node.value is not None:
                self._pass(node.value, self.entry_stream)
            if self.state is not None:
                self._return(node)
            self.state = None
        elif isinstance(node, cst.Raise):
            if node.exc is not None:
                self._eval(node.exc)
            self.state = None
        elif isinstance(node, cst.Del):
            self._delete(node.target, node)
        elif isinstance(node, (cst.Break, cst.Continue)):
            if self.loops:
                loop = self.loops[-1]
                self.live.current = loop.current
                (loop.breaks if isinstance(node, cst.Break) else loop.continues).append(self.live)
            self.state = None
        elif isinstance(node, cst.Assert):
            self._condition(node.test)

    # ---- compound statements

    def _condition(self, test: cst.BaseExpression) -> None:
        """`if t:` on a tensor copies its truth value to the host: a sync with the current stream.
        Only tensors made here count: a parameter tested is usually a flag, and taking it for a
        sync would hide the one-sided waits that branch on it."""
        self._header(test)
        if self.state is not None and self._tensor_operand(test, made_here=True):
            self._order(MarkUpdate(self.live.current, HOST))

    def _loop(self, node: cst.For | cst.While) -> None:
        super()._loop(node)
        if self.state is not None:
            self._waited_every_item(node)

    def _loop_frame(self, head: FlowState) -> FlowLoop:
        return FlowLoop(current=head.current)

    def _loop_target(self, target: cst.BaseAssignTargetExpression, iterable: cst.BaseExpression) -> None:
        self.statement = target
        self._bind(target, Value("other"))
        self.maybe_tensors.update(loop_tensors(target, iterable))
        owned = self.caller.owned - self.anypath.bound
        self.anypath.callers_items.update(
            name for name, container in iterated_items(target, iterable) if container in owned
        )
        kept_views = state_items(target, iterable, views=True) & self.used_as_tensors  # keys or values used as tensors
        self.anypath.borrowed.update((state_items(target, iterable) | kept_views) - self.anypath.callers_items)
        self.anypath.loop_items.update(target_names(target))
        if object_root(iterable) in self.anypath.callers_objects:
            self.anypath.callers_objects.update(target_names(target))
        self._bind_items(target, iterable)
        bind_kept_items(self.live.tensors, target, iterable)

    # ---- expressions

    # ---- accesses

    def _launched_before(self, stream: str) -> frozenset[str]:
        """What is ordered after the last launch on `stream` (by the caller, if none here)."""
        launch = self.live.tensors.get(launch_key(stream))
        if launch is not None and launch.writes:
            return next(iter(launch.writes)).after
        return frozenset({stream}) | (self.caller.ordered if stream == self.entry_stream else frozenset())

    def _make_access(self, node: cst.CSTNode, *, write: bool) -> Access:
        assert self.statement is not None
        return Access(node, self.live.current, write, self.block or self.statement, self.function)

    def _access(
        self,
        key: str,
        node: cst.CSTNode,
        *,
        write: bool,
        stream: str | None = None,
        after: frozenset[str] = frozenset(),
        produced: Produced = "written",
        region: Region | None = None,
        checked: bool = True,
    ) -> None:
        """A kernel on the current stream (or `stream`, for a called function's) reads or writes
        `key` (a write: as `produced` says; `region`: the part a basic index reached): check it
        against the accesses to parts it may overlap (unless not `checked`: a write that follows
        a read of the same kernel's, checked as that read), then record it, ordered before `after` too."""
        if write and self.anypath.tested:
            self._rebound(key)  # in place: what its tests said no longer holds
        tensor = self.live.tensors.get(key) or self._backward_written(key) or self._caller_written(key, node)
        tensor = tensor or self._written_before_fresh_stream(key, node, stream or self.live.current)
        tensor = tensor or TrackedTensor()
        access = replace(self._make_access(node, write=write), produced=produced, region=region)
        if region is not None:
            self.anypath.indexed_by.update(region_names(region))
        if stream is not None:
            access = replace(access, stream=stream)
        stream = access.stream
        if self.silent:
            quiet = frozenset({Mark(access, frozenset({HOST}))})
            if write:
                self.live.tensors[key] = replace(tensor, writes=quiet, reads=frozenset())
            else:
                self.live.tensors[key] = replace(tensor, reads=tensor.reads | quiet)
            return
        for conflict in conflicts(tensor, access, self._on_other_paths) if checked else ():
            callers = conflict.kind is not HazardKind.WRITE_AFTER_READ and self.anypath.callers_blocks.get(
                conflict.node, False
            )
            self._hazard(
                conflict.kind,
                key,
                conflict.access,
                conflict.other,
                origin=conflict.origin,
                produced=conflict.produced,
                callers=callers,
            )
        mark = Mark(access, issued_on(stream) | after, self.live.facts)
        for capturing, reads, writes in self.captures:
            if stream == capturing:  # another stream's work in the block runs now, uncaptured
                (writes if write else reads).add(key)
        self.live.tensors[launch_key(stream)] = TrackedTensor(writes=frozenset({replace(mark, access=LAUNCH_ACCESS)}))
        self.live.tensors[key] = with_access(tensor, mark)
        if tensor.alloc is not None and stream != tensor.alloc:
            self.anypath.used_off_pool.setdefault(key, set()).add(stream)

    def _on_other_paths(self, mark: Mark) -> bool:
        """The access was made only on paths this one is not on: the tests on the way here
        contradict those on the way there (`if nhwc:` then, later, `if not nhwc:`)."""
        facts = self.live.facts
        return bool(facts) and bool(mark.facts) and contradicts(mark.facts | facts)

    def _stream_by_name(self, stream: str) -> bool:
        """Whether a stream of the hazard is one only by its name (`with self.copy_stream:`,
        nothing binding it: `kinds-from-names`)."""
        by_name = self.imports.streams_by_name
        return any(part in by_name and part not in self.live.streams for part in alternatives(stream))

    def _hazard(
        self,
        kind: HazardKind,
        tensor: str,
        access: Access,
        other: str,
        release: cst.CSTNode | None = None,
        *,
        origin: str | None = None,
        produced: Produced = "written",
        returned: bool = False,
        dropped: bool = False,
        callers: bool = False,
        rests_on: frozenset[str] = frozenset(),
    ) -> None:
        """Once per access and other stream: the first release found is the one reported.
        `origin`: the function of the conflicting access, named only when it is another one;
        `rests_on`: assumptions beyond the producer's. The caller's writes, and the caller's
        work an allocation's block may still be in use by (`callers`), are ordered where every
        caller made the stream wait before the call (`Caller.ordered`, in their marks) or the
        stream waited on an event the caller recorded."""
        if (produced == "by the caller" or callers) and access.stream in self.anypath.waits_callers_event:
            return
        origin = origin if origin != self.function else None
        rests = self._rests_on(tensor, produced) | rests_on | self._assumed_of(tensor)
        if any(map(self._stream_by_name, (access.stream, other))):
            rests |= {assumed.KINDS_FROM_NAMES}
        fields = (kind, tensor, access, other, release, self.function, origin, produced, returned, dropped)
        hazard = Hazard(*fields, assumptions=rests)
        key = (kind, tensor, access.node, other)
        found = self.hazards.setdefault(key, hazard)
        if origin is not None and (found.origin is None or origin < found.origin) and found.release is release:
            self.hazards[key] = hazard  # several producers: name one, the same on every run


def _allocates_nothing(node: cst.BaseStatement | cst.BaseSmallStatement) -> bool:
    """A statement that hands out no device memory: `pass`, `del`, a docstring, or a call of a
    stream's or event's ordering method (`s.wait_stream(t)`, `torch.cuda.synchronize()`)."""
    smalls = node.body if isinstance(node, cst.SimpleStatementLine) else [node]
    return all(
        isinstance(small, (cst.Pass, cst.Del))
        or isinstance(small, cst.Expr)
        and (
            isinstance(small.value, cst.SimpleString)
            or isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value in ORDERING_METHODS
        )
        for small in smalls
    )
