"""The ordering model of the stream-flow analysis: accesses, the ordering facts kept on them,
and how they join.

State at each program point (`FlowState`):
- the current stream (`<current>` outside any `with torch.cuda.stream(...)`, else the source
  text of the stream expression: `s`, `self.copy_stream`);
- per tensor-valued name or attribute: its possible last writes, its reads since then, its uses
  on streams other than the one that allocated it, and the streams passed to `record_stream`;
- ordering facts, kept on each access as the set of tokens ordered after it: stream names
  (`a.wait_stream(b)` adds `a` to every access that has `b`), `event:e` (added by a record
  on a stream the access has) and `*` (a host sync: every later launch is ordered after it;
  also where `e.query()` returned True: the branch it guards, the exit of `while not e.query()`);
- the path facts (lint/pathfacts.py): what the tests on the way say of names (`method != 2`).

Every set is built from the function's own nodes and names, so the lattice is finite: loops
are iterated to a fixpoint and branches join by union of accesses and intersection of facts,
so an ordering made on one branch only does not order the other; it is held on that branch's
path facts instead (`Mark.held_if`), and holds again on a later path whose facts imply them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.tokens import (
    CURRENT,
    DEFAULT,
    HOST,
    UNKNOWN,
    alternatives,
    choice,
    every_item_of,
    is_local,
    on_path,
    path_of,
    without_path,
)
from csan_lint.lint.interpret import Loop
from csan_lint.lint.pathfacts import NO_FACTS, Facts, contradicts, implies, without
from csan_lint.lint.recognize import join_contexts
from csan_lint.lint.regions import Region, disjoint, mentions
from csan_lint.lint.summaries import ANY_OTHER
from csan_lint.runtime import kinds


class HazardKind(Enum):
    """Named after the runtime error kind that would confirm the hazard."""

    READ_AFTER_WRITE = kinds.READ_AFTER_WRITE
    WRITE_AFTER_WRITE = kinds.WRITE_AFTER_WRITE
    WRITE_AFTER_READ = kinds.WRITE_AFTER_READ
    FREE_IN_USE = kinds.FREE_IN_USE


class Missing(Enum):
    """The ordering a stream hazard lacks: which stream should have waited for which."""

    FORK = "fork"
    """The access is on a stream entered after the conflicting access on the current stream:
    that stream should have waited for the current one before its block."""
    JOIN = "join"
    """The conflicting access is on another stream (a side stream, the default stream): the
    access's stream should have waited for that one before the access."""


Produced = Literal["written", "allocated", "by the caller", "moved"]


@dataclass(frozen=True)
class Access:
    """One read or write of a tensor, on one stream, at one expression."""

    node: cst.CSTNode
    stream: str
    write: bool
    span_node: cst.CSTNode
    """The innermost stream `with` around the access, or its statement outside any block."""
    function: str | None = None
    """The function interpreted when the access was made (`Cls.method`; None: module body)."""
    produced: Produced = "written"
    """For a write: `allocated`, an allocation, which writes no data: the caching allocator may
    hand over a block that work launched earlier on `stream` still uses, so it stands for the
    stream's last launch before it (its `after` is that launch's), and a use on another stream
    must be ordered after it; `by the caller`: a parameter, written before the function was
    entered on the stream current then; `moved`: a module's parameters moved in place."""
    region: Region | None = None
    """The part of the tensor a basic index reached (`x[:, :1]`, lint/regions.py); None: all of it."""


@dataclass(frozen=True)
class Mark:
    access: Access
    after: frozenset[str]
    """Tokens ordered after the access: streams, `event:e`, or HOST."""
    facts: Facts = NO_FACTS
    """The path facts where the access was made (lint/pathfacts.py): a path they contradict
    does not have it."""
    held_if: frozenset[tuple[str, Facts]] = frozenset()
    """Tokens ordered after the access on the paths where a condition holds (an ordering made
    under `if c:`), added to `after` on a later path whose facts imply it (`Assumed`)."""

    def orders(self, stream: str) -> bool:
        """Ordered before `stream` on every path (a stream chosen at run time: before each
        choice; an access on `a or b`: where `s@a` and `s@b` hold, see `issued_on`)."""
        return self.unordered(stream, distinct=lambda a, b: a != b) is None

    def unordered(self, stream: str, distinct: Callable[[str, str], bool]) -> tuple[str, str] | None:
        """A path on which the access, on a stream `distinct` from the one of an access on
        `stream`, is not ordered before it: (its stream, that one) there, the first in sorted
        order; None if there is none."""
        if HOST in self.after or stream in self.after or every_item_of(stream) in self.after:
            return None
        own = self.access.stream
        for source in sorted(alternatives(own)):
            for target in sorted(alternatives(stream)):
                ordered = target in self.after or every_item_of(target) in self.after
                ordered = ordered or (own != source and on_path(target, source) in self.after)
                if distinct(source, target) and not ordered:
                    return source, target
        return None


@dataclass(frozen=True)
class Hazard:
    """An access on `stream` that is not ordered after `other`'s conflicting access.

    For FREE_IN_USE, `access` is the use on `stream`, `other` the allocating stream, and
    `release` the node where the tensor's last reference dies (None: the function returns).
    """

    kind: HazardKind
    tensor: str
    access: Access
    other: str
    release: cst.CSTNode | None = None
    function: str | None = None
    origin: str | None = None
    """The other function that made the conflicting access (a producer method), if any."""
    produced: Produced = "written"
    """How the conflicting write made the tensor (`Access.produced`)."""
    returned: bool = False
    """`access` writes a tensor of the caller's on side stream `other` and is still pending when
    the function returns: the caller's next use races with it."""
    dropped: bool = False
    """FREE_IN_USE of a tensor the caller allocated (on `other`) and passed in a list: `access`
    uses it on a side stream and is still pending when the function returns, so the caller's
    release of the list frees the block under it."""
    no_op: bool = False
    """`access` is a call that does nothing where it stands: a stream waiting on itself
    (`s.wait_stream(current_stream())` inside `with stream(s):`, READ_AFTER_WRITE: `access.stream`
    is not ordered after `other`), or `t.record_stream(s)` on the stream that allocated `t`
    (FREE_IN_USE: it protects no use on another stream)."""
    default_join: bool = False
    """`access` is a wait of the default stream on side stream (or event) `other`, written for a
    join of the caller's stream, which may be another one (lint/defaultjoin.py)."""
    assumptions: frozenset[str] = frozenset()
    """The assumptions (lint/analysis/assumptions.py) without which it would not be reported."""

    @property
    def missing(self) -> Missing:
        """The ordering that would have prevented a race (`Missing`); a FREE_IN_USE is
        prevented by a record instead, whatever this says."""
        return Missing.FORK if self.other == CURRENT else Missing.JOIN


@dataclass(frozen=True)
class TrackedTensor:
    writes: frozenset[Mark] = frozenset()
    """Possible last writes (several after a join)."""
    reads: frozenset[Mark] = frozenset()
    """Reads since the last write, the latest per stream on each path."""
    uses: frozenset[Mark] = frozenset()
    """Accesses on streams other than `alloc`: what the caching allocator must wait for."""
    alloc: str | None = None
    """Allocating stream of a tensor created here (or of memory a rebinding drops that it was not
    seen to allocate: `assumed_alloc`); None when its lifetime is not ours to track."""
    recorded: frozenset[str] = frozenset()
    pool: str | None = None
    """The stream whose allocator pool the memory came from, also for aliases and attributes
    (`alloc` is only on the owning name): handed to a caller on another stream, the tensor
    needs `record_stream`, or the caller's release frees a block that stream reuses at once."""
    escaped: bool = False
    unsure: bool = False
    """The result of a call of unknown code: a tensor only where it is used like one (a
    container when iterated or keyed)."""
    assumed_alloc: str | None = None
    """The assumption that says where memory this function did not allocate came from."""
    assumed: frozenset[str] = frozenset()
    """The assumptions under which the value is a tensor at all (a result of code the analysis
    cannot read: lint/analysis/assumptions.py); a hazard on it rests on them."""
    host: bool = False
    """Host memory, on every path (lint/devices.py): no stream writes it, and a copy of it to the
    device makes a new tensor."""

    def with_marks(self, update: Callable[[frozenset[Mark]], frozenset[Mark]]) -> TrackedTensor:
        writes, reads, uses = update(self.writes), update(self.reads), update(self.uses)
        if writes is self.writes and reads is self.reads and uses is self.uses:
            return self
        return replace(self, writes=writes, reads=reads, uses=uses)


class Within:
    """The accesses an alias of a part of a tensor inherits (`top = buf[:, :1]`): those that may
    reach that part on the path it is bound on (`facts`), each then taken to reach all of the
    alias, whose own indices are its own."""

    def __init__(self, region: Region | None, facts: Facts = NO_FACTS) -> None:
        self.region, self.facts = region, facts

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        if self.region is None or not marks:
            return marks
        kept = (
            mark
            for mark in marks
            if not disjoint(mark.access.region, self.region)
            and not (self.facts and mark.facts and contradicts(mark.facts | self.facts))
        )
        return frozenset(replace(mark, access=replace(mark.access, region=None)) for mark in kept)


class Unplaced:
    """`name` is rebound: a part of a tensor indexed by it (`buf[i]` before `i` moved on) is no
    longer known to be apart from anything, so the access is taken to reach all of it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        if not any(mentions(mark.access.region, self.name) for mark in marks):
            return marks
        return frozenset(
            replace(mark, access=replace(mark.access, region=None)) if mentions(mark.access.region, self.name) else mark
            for mark in marks
        )


def in_report_order(marks: frozenset[Mark]) -> Iterable[Mark]:
    """`marks` in an order that does not depend on memory addresses (a frozenset of marks
    iterates by the hash of their syntax nodes), so that when several accesses race with one,
    the same one is reported on every run: the function's own writes first."""
    if len(marks) < 2:
        return marks
    return sorted(
        marks,
        key=lambda mark: (
            mark.access.produced != "written",
            mark.access.produced,
            mark.access.stream,
            mark.access.function or "",
            sorted(mark.after),
        ),
    )


class MarkUpdate:
    """Drops `drop` from every mark, then adds `token` to those whose `after` holds `when`
    (every mark if `when` is None), and `token@a` to those that hold `when@a`."""

    def __init__(self, when: str | None, token: str | None, drop: str | None = None) -> None:
        self.when, self.token, self.drop = when, token, drop

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        changed = False
        result = []
        for mark in marks:
            after = mark.after
            if self.drop is not None:
                dropped = {token for token in after if without_path(token) == self.drop}
                after = after - dropped if dropped else after
            if self.token is not None and (self.when is None or self.when in after) and self.token not in after:
                after = after | {self.token}
            elif self.token is not None and self.when is not None:
                paths = {path for token in after if (path := path_of(token, self.when))}
                added = {on_path(self.token, path) for path in paths} - after
                after = after | added if added else after
            held = self._held(mark.held_if)
            if after is not mark.after or held is not mark.held_if:
                changed = True
                mark = replace(mark, after=after, held_if=held)
            result.append(mark)
        return frozenset(result) if changed else marks

    def _held(self, held: frozenset[tuple[str, Facts]]) -> frozenset[tuple[str, Facts]]:
        """Conditional tokens alike: a dropped one goes, one `when` brings `token` under its condition."""
        if not held:
            return held
        if self.drop is not None:
            held = frozenset(entry for entry in held if without_path(entry[0]) != self.drop)
        if self.token is not None and self.when is not None:
            held |= {(self.token, condition) for token, condition in held if token == self.when}
        return held


class Assumed:
    """A path gains facts: each mark's conditional tokens whose condition they imply (with the
    facts of the access) join its `after`."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        result, changed = [], False
        for mark in marks:
            known = self.facts | mark.facts
            held = {(token, condition) for token, condition in mark.held_if if implies(known, condition)}
            if held:
                changed = True
                mark = replace(mark, after=mark.after | {token for token, _ in held}, held_if=mark.held_if - held)
            result.append(mark)
        return frozenset(result) if changed else marks


class Rebound:
    """`name` is rebound: facts about it, and tokens held on conditions about it, no longer hold."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        result, changed = [], False
        for mark in marks:
            facts = without(mark.facts, self.name)
            held = frozenset(entry for entry in mark.held_if if without(entry[1], self.name) == entry[1])
            if facts != mark.facts or held != mark.held_if:
                changed = True
                mark = replace(mark, facts=facts, held_if=held)
            result.append(mark)
        return frozenset(result) if changed else marks


@dataclass
class FlowState:
    current: str = CURRENT
    tensors: dict[str, TrackedTensor] = field(default_factory=dict)
    streams: dict[str, str] = field(default_factory=dict)
    """Names bound to stream objects -> the stream they denote."""
    contexts: dict[str, str] = field(default_factory=dict)
    """Names bound to StreamContext objects -> the stream they make current."""
    facts: Facts = NO_FACTS
    """What the tests on the way here say (lint/pathfacts.py)."""
    released: dict[tuple[str, cst.CSTNode | None], TrackedTensor] = field(default_factory=dict)
    """Tensors whose last reference died (name, release; None: the return) with a use on another stream not yet
    ordered before their allocating stream: judged where that stream may allocate again."""

    def copy(self) -> FlowState:
        return FlowState(
            self.current, dict(self.tensors), dict(self.streams), dict(self.contexts), self.facts, dict(self.released)
        )

    def update_marks(self, update: Callable[[frozenset[Mark]], frozenset[Mark]]) -> None:
        for key, tensor in self.tensors.items():
            self.tensors[key] = tensor.with_marks(update)
        for released, tensor in self.released.items():
            self.released[released] = tensor.with_marks(update)


Sides = tuple[Facts, Facts]
"""The facts each of two joined paths has and the other lacks (an `if`'s test, and its negation)."""
_NO_SIDES: Sides = (NO_FACTS, NO_FACTS)


Kept = tuple[frozenset[str], frozenset[str]]
"""The side streams each of two joined paths alone binds (`_entered_on_one_path`)."""
_NOT_KEPT: Kept = (frozenset(), frozenset())


def _join_marks(a: frozenset[Mark], b: frozenset[Mark], kept: Kept, sides: Sides) -> frozenset[Mark]:
    if a == b:
        return a
    by_access = {mark.access: mark for mark in a}
    for mark in b:
        other = by_access.get(mark.access)
        by_access[mark.access] = mark if other is None else _join_mark(other, mark, kept, sides)
    return frozenset(by_access.values())


def _join_mark(a: Mark, b: Mark, kept: Kept, sides: Sides) -> Mark:
    """One access as two paths left it. A path whose facts contradict the access's does not have
    it: the other's orderings hold. A token ordered on one path only is held on that path's facts."""
    if a == b:
        return a
    facts = a.facts & b.facts
    if contradicts(a.facts | sides[0]):  # the first path cannot have made it
        return replace(b, facts=facts)
    if contradicts(b.facts | sides[1]):
        return replace(a, facts=facts)
    after = _meet(a.after, b.after) | (a.after & kept[0]) | (b.after & kept[1])
    held = _held_from(a, b, after, sides[0]) | _held_from(b, a, after, sides[1])
    return Mark(a.access, after, facts, frozenset(entry for entry in held if entry[0] not in after))


def _held_from(mine: Mark, theirs: Mark, after: frozenset[str], side: Facts) -> set[tuple[str, Facts]]:
    """What one path's tokens say after the join: a conditional token the other path holds too
    (or orders at once) still holds on its condition; one only this path holds, or orders,
    holds where this path's own facts (`side`) hold too."""
    held = set()
    for token, condition in mine.held_if:
        if (token, condition) in theirs.held_if or token in theirs.after or HOST in theirs.after:
            held.add((token, condition))
        elif side:
            held.add((token, condition | side))
    if side:
        held.update((token, side) for token in mine.after - after)
    return held


def _meet(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """Tokens ordered after the access on both paths; HOST stands for every token."""
    if HOST in a:
        return b
    if HOST in b:
        return a
    return a & b


def join_tensor(a: TrackedTensor, b: TrackedTensor, kept: Kept = _NOT_KEPT, sides: Sides = _NO_SIDES) -> TrackedTensor:
    """`kept`: per path, the tokens whose orderings and `record_stream`s made there hold wherever
    the stream may be used (`_entered_on_one_path`); `sides`: the facts only each path has."""
    if a == b:
        return a
    return TrackedTensor(
        writes=_join_marks(a.writes, b.writes, kept, sides),
        reads=_join_marks(a.reads, b.reads, kept, sides),
        uses=_join_marks(a.uses, b.uses, kept, sides),
        alloc=a.alloc if a.alloc == b.alloc else None,
        recorded=(a.recorded & b.recorded) | (a.recorded & kept[0]) | (b.recorded & kept[1]),
        pool=_join_pool(a.pool, b.pool),
        escaped=a.escaped or b.escaped,
        unsure=a.unsure and b.unsure,
        assumed_alloc=a.assumed_alloc or b.assumed_alloc,
        assumed=a.assumed | b.assumed,
        host=a.host and b.host,
    )


def _join_pool(a: str | None, b: str | None) -> str | None:
    """The pool on every path that knows one (a result of unknown code knows none)."""
    return a or b if a is None or b is None or a == b else None


def join_states(states: Iterable[FlowState | None]) -> FlowState | None:
    """Facts that hold on every path; accesses that happen on any path."""
    live = [state for state in states if state is not None]
    if not live:
        return None
    result = live[0].copy()
    for state in live[1:]:
        kept = _entered_on_one_path(result, state)
        sides = (result.facts - state.facts, state.facts - result.facts)
        for key, tensor in state.tensors.items():
            mine = result.tensors.get(key)
            result.tensors[key] = tensor if mine is None else join_tensor(mine, tensor, kept, sides)
        for released, tensor in state.released.items():  # released on some path: judged on every one
            mine = result.released.get(released)
            result.released[released] = tensor if mine is None else join_tensor(mine, tensor, kept, sides)
        result.streams = _join_bindings(result.streams, state.streams)
        result.contexts = join_contexts(result.contexts, state.contexts)
        result.facts &= state.facts
    return result


def _entered_on_one_path(a: FlowState, b: FlowState) -> Kept:
    """Per path, the side streams a context or a name binds to there only (`ctx =
    torch.cuda.stream(s)` where the other path binds `nullcontext()`; `stream = self.s` where
    the other binds `current_stream()`): the stream is used through the binding on that path
    alone, so an ordering of it made on that path (`s.wait_stream(...)` under the same `if`)
    holds wherever it is used. Assumed: the stream is not used directly on the other path."""
    left = {*a.contexts.values(), *a.streams.values()}
    right = {*b.contexts.values(), *b.streams.values()}

    def parts(streams: set[str]) -> frozenset[str]:
        return frozenset({part for stream in streams for part in alternatives(stream)} - {CURRENT, DEFAULT, UNKNOWN})

    return parts(left - right), parts(right - left)


def _join_bindings(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    """A name bound to one stream on both paths keeps it, to different known ones it is a stream
    chosen at run time (`a or b`), to an unknown one UNKNOWN. A local name bound on one path
    only keeps that binding (used on the other path, it would raise NameError); an attribute not
    bound on a path denotes the stream spelled like it."""
    joined = {}
    for key in a.keys() | b.keys():
        local = is_local(key)
        left = a[key] if key in a else b[key] if local else key
        right = b[key] if key in b else a[key] if local else key
        chosen = choice((left, right)) if UNKNOWN not in (left, right) else None
        joined[key] = left if left == right else chosen or UNKNOWN
    return joined


_LAUNCH_NODE = cst.Name("launch")
LAUNCH_ACCESS = Access(_LAUNCH_NODE, "", True, _LAUNCH_NODE)
"""Stands for the last launch on a stream: the mark under `launch_key(stream)`."""


LAUNCHES = "\0launch:"
"""The prefix of every stream's `launch_key`."""


def launch_key(stream: str) -> str:
    """The state key of a stream's last launch (no name in source spells it): an allocation on
    the stream is ordered wherever that launch is."""
    return f"{LAUNCHES}{stream}"


@dataclass
class FlowLoop(Loop[FlowState]):
    current: str = field(kw_only=True)
    """The stream current in the loop body: `break` inside a stream block leaves the block too."""


class FactUpdate:
    """A called function's orderings, applied at once, so that orderings it made in another
    order do not chain: each token of a mark brings the tokens its fact lists; a token whose
    fact leaves it out (an event the function re-recorded) is dropped."""

    def __init__(self, facts: Mapping[str, list[tuple[bool, frozenset[str]]]]) -> None:
        self.facts = facts
        self.everywhere = frozenset().union(*(after for _, after in facts.get(ANY_OTHER, ())))

    def __call__(self, marks: frozenset[Mark]) -> frozenset[Mark]:
        changed = False
        result = []
        for mark in marks:
            if HOST not in mark.after:
                added, dropped = set(self.everywhere), set()
                for token in mark.after & self.facts.keys():
                    entries = self.facts[token]
                    added.update(*(after for _, after in entries))
                    if not any(keeps for keeps, _ in entries):
                        dropped.add(token)
                after = (mark.after - dropped) | added
                held = frozenset(entry for entry in mark.held_if if entry[0] not in dropped)
                if after != mark.after or held != mark.held_if:
                    changed = True
                    mark = replace(mark, after=frozenset(after), held_if=held)
            result.append(mark)
        return frozenset(result) if changed else marks


def query_poll(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """`(r, True)` for a test `r.query()`, `(r, False)` for `not r.query()`: the truth value of
    the test at which `query()` returned True."""
    call, outcome = test, True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        call, outcome = test.expression, False
    if (
        isinstance(call, cst.Call)
        and not call.args
        and isinstance(call.func, cst.Attribute)
        and api.method_op(call.func.attr.value)[0] == api.QUERY_RECEIVER
    ):
        return call.func.value, outcome
    return None
