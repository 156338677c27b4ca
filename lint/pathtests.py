"""Path tests: what a branch's test tells the rest of its path (lint/pathfacts.py), and the
streams it says are one (`if current_stream() != s: s.wait_stream(current_stream())`).

Part of `FunctionAnalysis` (lint/accesses.py): the interpreter assumes a test's outcome on each
side of a branch (`_assume`); an assignment that picks a stream by a test is split the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from csan_lint.lint.analysis.tokens import is_named
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import Assumed, FlowState, MarkUpdate, join_states, launch_key
from csan_lint.lint.pathfacts import NO_FACTS, Fact, Facts, conjuncts, equated, facts_of, host_resident, none_names
from csan_lint.lint.values import Value


class PathTests:
    """The path-test half of `FunctionAnalysis`."""

    anypath: AnyPath
    state: FlowState | None
    live: FlowState
    # The host's methods from the other parts.
    _assign: Callable[[Sequence[cst.BaseExpression], cst.BaseExpression], None]
    _bind: Callable[[cst.BaseExpression, Value], None]
    _eval: Callable[[cst.CSTNode], None]
    _is_stream: Callable[[cst.BaseExpression], bool]
    _order: Callable[[MarkUpdate], None]
    _stream: Callable[[cst.BaseExpression], str | None]
    _value: Callable[[cst.BaseExpression], Value]

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
        said = frozenset(map(self._of_stream, facts_of(test, outcome)))
        for name in none_names(said) | host_resident(said):
            tensors.pop(name, None)
            if launch_key(name) in tensors:  # `stream(None)` enters nothing: its work ran here, in order
                self._order(MarkUpdate(name, self.live.current))
        facts = frozenset(fact for fact in said if fact.name not in tensors or not tensors[fact.name].writes)
        if facts <= self.live.facts:
            return
        self.anypath.tested.update(fact.name for fact in facts)
        self.live.facts |= facts
        self.live.update_marks(Assumed(self.live.facts))

    def _of_stream(self, fact: Fact) -> Fact:
        """A stream object is always true: `if s:` of a stream with work on it is `if s is not
        None:`, the test a `with torch.cuda.stream(s):` block's work was made under."""
        if fact.kind not in ("truthy", "falsy") or launch_key(fact.name) not in self.live.tensors:
            return fact
        return Fact(fact.name, "not in" if fact.kind == "truthy" else "in", frozenset({None}))

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
