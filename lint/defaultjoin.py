"""A join into `default_stream()` written for a join of the caller's stream (CSL102).

A function's results, and the side-stream work it leaves pending, are used next on the stream
that was current when it was entered: its caller's. `default_stream()` is that stream only where
the caller runs on the default stream; under `with torch.cuda.stream(s):` or during a CUDA-graph
capture it is another one, and `default_stream().wait_stream(side)` orders nothing the caller
does next (a DDP that joined its communication stream so was fixed by waiting on
`current_stream()`). A caller in the linted code that calls the function outside any stream
block proves nothing: its own caller may be on a side stream.

Not judged where the default stream is current by construction (inside
`with stream(default_stream()):`, after `set_stream(default_stream())`, in a module's body, in a
function every call of which is made in such a block), where the function makes the default
stream current anywhere (the wait is taken to serve the work there), where the caller's stream is ordered after the same
stream or event on every path to the return anyway (its own `current_stream().wait_stream(s)`, a
host sync), nor for a wait on a stream that may be the caller's (the current one, a loop's item,
a choice made at run time) or on an event recorded here on the caller's stream.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import libcst as cst

from csan_lint.lint.analysis.assumptions import DEFAULT_STREAM_JOIN
from csan_lint.lint.analysis.tokens import CURRENT, DEFAULT
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.effects import PROBE_ACCESS, Helpers
from csan_lint.lint.names import DEFAULT_STREAM, ImportTable, dotted_name
from csan_lint.lint.nodes import descendants
from csan_lint.lint.ordering import Access, FlowState, Hazard, HazardKind, Mark, TrackedTensor, join_states, launch_key
from csan_lint.lint.vocabulary import STREAM_WAITS


class DefaultJoins:
    """The part of `FunctionAnalysis` that judges waits of the default stream: each is held at
    the wait and reported when the function ends unless something there says it was meant."""

    anypath: AnyPath

    live: FlowState
    function: str | None
    entry_stream: str
    hazards: dict[tuple[object, ...], Hazard]
    records: set[tuple[str, str]]
    exits: list[FlowState]
    kept_defaults: frozenset[str]
    """`self.x` kept from `default_stream()` in `__init__` (streamflow.py `kept_default_streams`)."""
    default_joins: dict[cst.Call, Hazard]
    runs_on_default: bool
    """Whether the function makes the default stream current (a block, `set_stream`)."""
    _definite: Callable[[str], bool]
    _make_access: Callable[..., Access]
    _assumes: Callable[[str], bool]
    helpers: Helpers | None

    def _is_default(self, stream: str) -> bool:
        """`default_stream()`, a name or `self.x` bound to it, or a block entered on it by every
        caller (lint/scan.py `entry_streams` spells it as written)."""
        return stream == DEFAULT or stream in self.kept_defaults or stream.endswith(".default_stream()")

    def _made_current(self, stream: str) -> None:
        """A block or `set_stream` makes `stream` current: on the default stream, the function
        runs work of its own there, which its waits of the default stream may serve."""
        self.runs_on_default |= self._is_default(stream)

    def _default_join(self, node: cst.Call, waiter: str, token: str, argument: cst.BaseExpression) -> None:
        """`default_stream().wait_stream(s)` (`token` is `s`) or `.wait_event(e)` (`event:e`) on
        the caller's stream: held until the function ends (`_judge_default_joins`)."""
        current = self.live.current
        if self.function is None or not self._is_default(waiter) or self._is_default(current):
            return
        if not self._assumes(DEFAULT_STREAM_JOIN) or self._observed_on_default():
            return
        if current != self.entry_stream or not self._definite(current) or not self._definite(token):
            return
        if isinstance(argument, cst.Name) and argument.value in self.anypath.loop_items:
            return  # `for s in streams:` may reach the caller's stream
        if token in (CURRENT, current) or self._is_default(token) or self._joined(token):
            return
        if any(event == token and (stream == current or self._is_default(stream)) for event, stream in self.records):
            return  # an event of the caller's stream: the default stream forks from it
        self.live.tensors[_probe_key(token)] = TrackedTensor(writes=frozenset({Mark(PROBE_ACCESS, frozenset({token}))}))
        access = self._make_access(node, write=False)
        self.default_joins[node] = Hazard(
            HazardKind.READ_AFTER_WRITE,
            "",
            access,
            token,
            function=self.function,
            default_join=True,
            assumptions=frozenset({DEFAULT_STREAM_JOIN}),
        )

    def _observed_on_default(self) -> bool:
        """Whether test runs saw every call of the function entered on the default stream
        (lint/run_facts.py): there the default stream is the caller's, and the join serves it."""
        return self.helpers is not None and self.helpers.observed.entered_on_default(self.function)

    def _joined(self, stream: str) -> bool:
        """Whether the current stream already waits on every launch made on `stream` so far."""
        launch = self.live.tensors.get(launch_key(stream))
        return launch is not None and all(mark.orders(self.live.current) for mark in launch.writes)

    def _judge_default_joins(self) -> None:
        """Reports the waits held: the caller's stream is not ordered after what they waited on
        at every return."""
        if not self.default_joins or self.runs_on_default:
            return
        end = join_states(self.exits)
        if end is None:
            return  # it never returns
        for node, hazard in self.default_joins.items():
            probe = end.tensors.get(_probe_key(hazard.other))
            if probe is None or not all(mark.orders(self.entry_stream) for mark in probe.writes):
                self.hazards.setdefault(("default-join", node), hazard)


def _probe_key(token: str) -> str:
    """The state key of what a default join waited on: ordered after it, the caller's stream is
    joined anyway. Its own key: the summaries' probes (`probe_key`) start at the function's entry."""
    return f"\0default-join:{token}"


def waits_into_default(function: cst.FunctionDef, imports: ImportTable, kept: Collection[str]) -> bool:
    """Whether `function` makes the default stream wait (`default_stream().wait_stream(...)`,
    `.wait_event(...)`, on a local or a kept `self.x` bound to it): worth interpreting, with or
    without a stream block of its own."""
    defaults = set(kept)
    receivers: list[cst.BaseExpression] = []
    for node in descendants(function.body):
        if type(node) is cst.Assign and _is_default_call(node.value, imports):
            defaults.update(key for target in node.targets if (key := dotted_name(target.target)) is not None)
        elif type(node) is cst.Call and isinstance(node.func, cst.Attribute) and node.func.attr.value in STREAM_WAITS:
            receivers.append(node.func.value)
    return any(_is_default_call(receiver, imports) or dotted_name(receiver) in defaults for receiver in receivers)


def _is_default_call(expr: cst.BaseExpression, imports: ImportTable) -> bool:
    return isinstance(expr, cst.Call) and imports.qualified(expr.func) == DEFAULT_STREAM
