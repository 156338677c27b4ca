"""The control-flow driver shared by the abstract interpreters (`streamflow`, `hostflow`).

Both walk a function body statement by statement over their own abstract state; what they
share is how control flow moves that state: branches run on copies and join, loops iterate
to a fixpoint (bounded), `break`/`continue` states join at the loop's exit and head, and a
`try` handler starts from the join of every point the body could raise at. A subclass
supplies the state's join, the simple statements, `with`, and the expression hooks. While a
`Probe` is active (`probing`), each statement's state is offered to it first (`csan-lint reveal`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.tokens import root
from csan_lint.lint.loopindex import CountedLoop, IndexFacts, counted_loop, index_fact, integer
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import target_names
from csan_lint.lint.pathfacts import facts_of
from csan_lint.lint.vocabulary import STREAM_WAITS


class _Copyable(Protocol):
    def copy(self) -> Self: ...


State = TypeVar("State", bound=_Copyable)


@dataclass
class Loop(Generic[State]):
    """The states that leave a loop body early: `break` joins at the exit, `continue` at the head."""

    breaks: list[State] = field(default_factory=list)
    continues: list[State] = field(default_factory=list)


Frame = TypeVar("Frame", bound=Loop[Any])


@dataclass
class Probe:
    """What `csan-lint reveal` asks of the interpreters (lint/shell/reveal.py): the state
    before `targets` (the statement at the line asked about) on each visit, by run; and which
    runs started the scope that holds it (`entry`: its first statement, seen by every run of it)."""

    targets: frozenset[cst.CSTNode]
    entry: cst.CSTNode
    runs: list[Interpreter[Any, Any]] = field(default_factory=list)
    """Every interpreter that ran the scope, in the order they started."""
    visits: dict[int, list[Any]] = field(default_factory=dict)
    """Per run (by its place in `runs`), a copy of the state at each visit of a target."""

    def seen(self, interpreter: Interpreter[Any, Any], node: cst.CSTNode) -> None:
        """`interpreter` is about to run `node`, on a live path (`interpreter.state`)."""
        if (node is self.entry or node in self.targets) and interpreter not in self.runs:
            self.runs.append(interpreter)
        if node in self.targets:
            self.visits.setdefault(self.runs.index(interpreter), []).append(interpreter.live.copy())

    def state_at(self, run: int) -> Any:
        """The join of the states run `run` had at the targets (what held on every path it
        followed there, a loop's passes included); None if it never got there."""
        visits = self.visits.get(run)
        return self.runs[run]._join(visits) if visits else None


OWN_RUN = "its own run"
SUMMARY = "a summary for a caller"

_PROBE: ContextVar[Probe | None] = ContextVar("csan_lint_probe", default=None)


@contextmanager
def probing(probe: Probe) -> Iterator[Probe]:
    """Every interpreter run inside the block reports to `probe`."""
    token = _PROBE.set(probe)
    try:
        yield probe
    finally:
        _PROBE.reset(token)


class Interpreter(ABC, Generic[State, Frame]):
    """Runs statements over `state` (None: the path cannot reach here); `loops` holds a frame
    per loop being run, of the kind `_loop_frame` makes."""

    max_passes: int
    """Loop passes before the fixpoint iteration gives up and keeps the head it has."""
    state: State | None
    statement: cst.CSTNode | None
    """The node a finding made now is located at."""
    loops: list[Frame]
    imports: ImportTable
    index_facts: tuple[IndexFacts, ...] = ()
    """What the passes being run know of their counted loops' indices (lint/loopindex.py)."""
    role: str = OWN_RUN
    """Which run of its body this is (`csan-lint reveal` names it): `OWN_RUN`, `SUMMARY` (a
    callee run for its caller's summary, not shown), or another run's own words."""

    @property
    def live(self) -> State:
        """The state of the path being interpreted: helpers run only while it is reachable."""
        assert self.state is not None
        return self.state

    # ---- hooks

    @abstractmethod
    def _join(self, states: Iterable[State | None]) -> State | None:
        """Facts that hold on every path of `states`; None if none is live."""

    @abstractmethod
    def _small(self, node: cst.BaseSmallStatement) -> None:
        """Interprets one simple statement."""

    @abstractmethod
    def _with(self, node: cst.With) -> None:
        """Interprets a `with` statement and its body."""

    @abstractmethod
    def _eval(self, node: cst.CSTNode) -> None:
        """Evaluates an expression for its effects."""

    @abstractmethod
    def _forget(self, key: str) -> None:
        """`key` is rebound to something unknown."""

    @abstractmethod
    def _loop_frame(self, head: State) -> Frame:
        """The frame for one pass of a loop that starts from `head`."""

    @abstractmethod
    def _loop_target(self, target: cst.BaseAssignTargetExpression, iterable: cst.BaseExpression) -> None:
        """A `for` target is bound anew, to an item of `iterable`, at the start of each pass."""

    def _condition(self, test: cst.BaseExpression) -> None:
        """Evaluates an `if`/`while` test."""
        self._header(test)

    def _iterate(self, iterable: cst.BaseExpression) -> None:
        """Evaluates a `for` loop's iterable."""
        self._header(iterable)

    def _polled(self, test: cst.BaseExpression, *, outcome: bool) -> None:
        """Where `test` had the truth value `outcome`; nothing follows from that by default."""

    # ---- driver

    def _header(self, expr: cst.BaseExpression) -> None:
        """Evaluates a compound statement's own expression; a finding there spans just it."""
        self.statement = expr
        self._eval(expr)

    def run(self, body: Sequence[cst.BaseStatement | cst.BaseSmallStatement]) -> None:
        for statement in body:
            if self.state is None:
                return
            self._probe(statement)
            self._statement(statement)

    def _probe(self, node: cst.CSTNode) -> None:
        """`node` is about to run: `csan-lint reveal` may want the state here, before anything
        an interpreter does first (streamflow judges released blocks before an allocation)."""
        if (probe := _PROBE.get()) is not None and self.state is not None:  # an `elif` may be unreachable
            probe.seen(self, node)

    def _statement(self, node: cst.BaseStatement | cst.BaseSmallStatement) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if self.state is None:
                    return
                self.statement = node
                self._small(small)
        elif isinstance(node, cst.BaseSmallStatement):  # the body of a one-line suite (`if c: x = y`)
            self.statement = node
            self._small(node)
        elif isinstance(node, cst.If):
            self._if(node)
        elif isinstance(node, cst.With):
            self._with(node)
        elif isinstance(node, (cst.For, cst.While)):
            self._loop(node)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self._try(node)
        elif isinstance(node, cst.Match):
            self._header(node.subject)
            entry = self.state
            ends = []
            for case in node.cases:
                self.state = entry.copy() if entry is not None else None
                self.run(case.body.body)
                ends.append(self.state)
            self.state = self._join([entry, *ends])
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._forget(node.name.value)

    def _if(self, node: cst.If) -> None:
        self._condition(node.test)
        known = self.imports.device_fact(node.test)
        for facts in self.index_facts if known is None else ():
            known = index_fact(node.test, facts) if known is None else known
        if known is not None:  # the device decides: one branch only
            if known:
                self.run(node.body.body)
            elif isinstance(node.orelse, cst.If):
                self._elif(node.orelse)
            elif isinstance(node.orelse, cst.Else):
                self.run(node.orelse.body.body)
            return
        entry = self.state
        self.state = entry.copy() if entry is not None else None
        self._polled(node.test, outcome=True)
        self.run(node.body.body)
        then = self.state
        self.state = entry
        self._polled(node.test, outcome=False)
        if isinstance(node.orelse, cst.If):
            self._elif(node.orelse)
        elif isinstance(node.orelse, cst.Else):
            self.run(node.orelse.body.body)
        self.state = self._join([then, self.state])

    def _elif(self, node: cst.If) -> None:
        """An `elif`: to a reader, a statement of its own (`csan-lint reveal` stops there too)."""
        self._probe(node)
        self._if(node)

    def _loop(self, node: cst.For | cst.While) -> None:
        if isinstance(node, cst.For):
            self._iterate(node.iter)
            counted = counted_loop(node)
            if counted is not None:
                self._counted_loop(node, counted)
                return
        head: State | None = self.live
        breaks: list[State] = []
        if isinstance(node, cst.For) and (runs_at_least_once(node.iter) or only_waits(node)):
            head, breaks = self._loop_pass(node, self.live)  # the exit is never reached before it
        last_breaks: list[State] = []
        for _ in range(self.max_passes if head is not None else 0):
            assert head is not None
            end, last_breaks = self._loop_pass(node, head)
            new_head = self._join([head, end])
            assert new_head is not None  # `head` is live
            if new_head == head:
                break
            head = new_head
        self.state = head.copy() if head is not None else None
        if isinstance(node, cst.While):  # the loop ends after its test ran once more
            self._condition(node.test)
            self._polled(node.test, outcome=False)  # `while not e.query()` ends when e's work is done
        if node.orelse is not None:
            self.run(node.orelse.body.body)
        self.state = self._join([self.state, *breaks, *last_breaks])

    def _counted_loop(self, node: cst.For, counted: CountedLoop) -> None:
        """`for i in range(a, b)` whose body tests `i`: its first passes run apart, `i` known,
        the later ones with `i` past them; each pass runs twice, as one followed by another
        (`i < b - 1` holds) and as the last, which alone leads to the exit."""
        exits: list[State | None] = [] if runs_at_least_once(node.iter) else [self.live]
        head: State | None = self.live
        for p in range(counted.peeled + self.max_passes):
            if head is None:
                break
            value = counted.start + p if p < counted.peeled else None
            at_least = counted.start + min(p, counted.peeled)
            facts = [IndexFacts(counted.index, value, at_least, counted.last, last) for last in (False, True)]
            (end, breaks), (last_end, last_breaks) = (self._loop_pass(node, head, fact) for fact in facts)
            exits += [last_end, *breaks, *last_breaks]
            if p < counted.peeled:
                head = end
                continue
            new_head = self._join([head, end])
            if new_head == head:
                break
            head = new_head
        self.state = self._join(exits)
        if node.orelse is not None:
            self.run(node.orelse.body.body)

    def _loop_pass(
        self, node: cst.For | cst.While, head: State, facts: IndexFacts | None = None
    ) -> tuple[State | None, list[State]]:
        """One pass of the body from `head`: the state it hands the next pass (its end joined
        with its `continue`s) and the states its `break`s leave with. `facts`: what the pass
        knows of a counted loop's index."""
        self.state = head.copy()
        self.loops.append(self._loop_frame(head))
        if facts is not None:
            self.index_facts = (*self.index_facts, facts)
        if isinstance(node, cst.While):
            self._condition(node.test)
        else:
            self._loop_target(node.target, node.iter)
        self.run(node.body.body)
        if facts is not None:
            self.index_facts = self.index_facts[:-1]
        loop = self.loops.pop()
        return self._join([self.state, *loop.continues]), loop.breaks

    def _try(self, node: cst.Try | cst.TryStar) -> None:
        raised_from: list[State | None] = []
        """Handlers may start after any statement of the body: the join of all those points."""
        for statement in node.body.body:
            raised_from.append(self.state.copy() if self.state is not None else None)
            if self.state is not None:
                self._probe(statement)
                self._statement(statement)
        body_end = self.state
        raised_from.append(body_end)
        ends = []
        for handler in node.handlers:
            self.state = self._join(raised_from)
            self.run(handler.body.body)
            ends.append(self.state)
        self.state = body_end
        if node.orelse is not None:
            self.run(node.orelse.body.body)
        self.state = self._join([self.state, *ends])
        if node.finalbody is not None:
            self.run(node.finalbody.body.body)


def runs_at_least_once(iterable: cst.BaseExpression) -> bool:
    """A `for` over a literal with an unstarred item, or a `range` of integer literals that is
    not empty (also through `enumerate`/`reversed`): its body runs before the loop can end."""
    if isinstance(iterable, (cst.List, cst.Tuple, cst.Set)):
        return any(not isinstance(element, cst.StarredElement) for element in iterable.elements)
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.args):
        return False
    name, args = iterable.func.value, [arg.value for arg in iterable.args]
    if name in ("enumerate", "reversed"):
        return runs_at_least_once(args[0])
    bounds = [bound for bound in map(integer, args) if bound is not None]
    if name != "range" or len(bounds) != len(args) or len(bounds) > 3 or bounds[2:] == [0]:
        return False  # a step of 0 raises
    return len(range(*bounds)) > 0


def only_waits(loop: cst.For) -> bool:
    """`for req in reqs: req.wait()`, `for s in producer_streams: side.wait_stream(s)`, `for
    state in states: state.stream.synchronize()`, nested loops of such waits too, each maybe
    under a test that the item has what it waits on (`if state.stream:`): a wait on every
    handle (or producer stream, or event) of a collection, taken as one wait on all of them.
    They stand for work launched before (as one handle's wait does), so an empty collection is
    taken to hold none that needed waiting, and the path that skips the body is not followed."""
    return _waits_only(loop.body.body, set(target_names(loop.target)))


def _waits_only(body: Sequence[cst.BaseStatement | cst.BaseSmallStatement], items: set[str]) -> bool:
    for statement in body:
        if isinstance(statement, cst.For):
            if statement.orelse is not None or not only_waits(statement):
                return False
        elif isinstance(statement, cst.If):  # `if state.stream:`: an item without one has no work
            if statement.orelse is not None or not _of_item(statement.test, items):
                return False
            if not _waits_only(statement.body.body, items):
                return False
        elif not isinstance(statement, cst.SimpleStatementLine) or not all(
            _waits_item(small, items) for small in statement.body
        ):
            return False
    return True


def _of_item(test: cst.BaseExpression, items: set[str]) -> bool:
    """`state.stream`, `state.stream is not None`: whether an item (or what it holds) exists."""
    [*facts] = facts_of(test, True)
    exists = len(facts) == 1 and (facts[0].kind == "truthy" or facts[0].values == {None} and facts[0].kind == "not in")
    return exists and root(facts[0].name) in items


def _waits_item(statement: cst.BaseSmallStatement, items: set[str]) -> bool:
    """`h.wait()`: an async handle waited on (an event's `wait` names its stream, or none);
    `s.wait_stream(item)`, `s.wait_event(item)` on an item of the loop; or the host's wait for
    an item, or a stream or event it holds (`state.stream.synchronize()`)."""
    call = statement.value if isinstance(statement, cst.Expr) else None
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
        return False
    method = call.func.attr.value
    if api.method_op(method) == (api.WAIT_EVENT, False):
        return not call.args
    if api.method_op(method)[0] == api.SYNC_RECEIVER and not call.args:
        receiver = dotted_name(call.func.value)
        return receiver is not None and root(receiver) in items
    waited = call.args[0].value if len(call.args) == 1 else None
    return method in STREAM_WAITS and isinstance(waited, cst.Name) and waited.value in items
