"""What the callers of a function in the same module do around the call: join or fork a stream.

A function's pending side-stream work at return is left to its callers when every one of them
joins that stream itself (DESIGN.md: "flagged unless every caller in the linted code orders
it"). The test reads each caller's calls (the API table says which order what) on the same
stream token (a stream expression's token is its code: `self._streams["post"]`); where in the
body is not checked. What the callers ordered before each call is not judged here: it is
interpreted at the call (`Calls._note_orders_at_call`) and is the callee's entry
(`Caller.ordered`, lint/streamflow.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import descendants


class CallersJoin:
    """Whether every function of the module that calls `name` joins a stream (waits on it:
    `x.wait_stream(s)`) or synchronizes (`x.synchronize()`). Callers' calls are collected only
    when a finding asks."""

    def __init__(self, name: str, functions: Sequence[tuple[str, cst.FunctionDef]]) -> None:
        self.name, self.functions = name, functions
        self.calls: list[list[cst.Call]] | None = None

    def __call__(self, stream: str) -> bool:
        """Every caller joins `stream` into its own: the callee's pending work there is ordered."""
        return self._every_caller(lambda call: _waits_on(call, stream) or _synchronizes(call))

    def called(self) -> bool:
        """Some function of the module calls it: a value it returns goes to code we see."""
        return bool(self._callers())

    def _every_caller(self, orders: Callable[[cst.Call], bool]) -> bool:
        callers = self._callers()
        return bool(callers) and all(any(map(orders, calls)) for calls in callers)

    def _callers(self) -> list[list[cst.Call]]:
        """The calls each function of the module that calls `name` makes (nested functions'
        included, as a nested caller's are its own too)."""
        if self.calls is None:
            leaf = self.name.rpartition(".")[2]
            self.calls = []
            for name, function in self.functions:
                calls = [node for node in descendants(function.body) if type(node) is cst.Call]
                if name != self.name and any(_leaf(call) == leaf for call in calls):
                    self.calls.append(calls)
        return self.calls


def _leaf(call: cst.Call) -> str:
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""


def _waits_on(call: cst.Call, stream: str) -> bool:
    """`x.wait_stream(stream)`."""
    return (
        api.method_op(_leaf(call))[0] == api.WAIT_STREAM
        and len(call.args) == 1
        and dotted_name(call.args[0].value) == stream
    )


def _synchronizes(call: cst.Call) -> bool:
    """`x.synchronize()`: the device, a stream or an event, with the host."""
    return type(call.func) is cst.Attribute and not call.args and api.method_op(_leaf(call))[0] == api.SYNC_RECEIVER


class CallSite(NamedTuple):
    """What one call of a module's function shows of its caller (`Calls._note_orders_at_call`);
    over every call of it, its entry (`at_every_call`)."""

    ordered: frozenset[str]
    """The streams the caller made wait for its own before the call, as the callee names them:
    what the caller wrote there before is ordered before them."""
    unwritten: frozenset[str]
    """Parameters given values the caller holds no write of (an attribute, an item, a number):
    as unknown to the callee as to its caller, taken as ready."""
    contexts: frozenset[str] = frozenset()
    """Parameters given a stream context (`torch.cuda.stream(s)`): in that call, `with param:`
    enters that stream, `param.stream` (over every call: some call gives one)."""
    on_entry: frozenset[str] = frozenset()
    """Parameters given values the caller last wrote on the stream current at the call: written,
    for the callee, on the stream it is entered on, not on the one its callers' blocks left."""


NO_SITE = CallSite(frozenset(), frozenset())


def both(one: CallSite, other: CallSite) -> CallSite:
    """What two calls (or two visits of one call) both show; the stream contexts either gives."""
    return CallSite(
        one.ordered & other.ordered,
        one.unwritten & other.unwritten,
        one.contexts | other.contexts,
        one.on_entry & other.on_entry,
    )


def at_every_call(sites: Sequence[CallSite], calls: int) -> CallSite:
    """What every call shows, where every call of the function (`calls`) was seen; else nothing;
    and the stream contexts some call gives."""
    contexts = frozenset[str]().union(*(site.contexts for site in sites))
    if not sites or len(sites) != calls:
        return NO_SITE._replace(contexts=contexts)
    return functools.reduce(both, sites)


NO_CALLERS = CallersJoin("", ())
"""For a function no linted code calls: no caller orders anything."""


@dataclass(frozen=True)
class Caller:
    """What a function takes of its caller, set once at entry (`Returns.produced_by_caller`): the
    interpreter's state starts from it, and its returns are judged against it."""

    owned: frozenset[str] = frozenset()
    """Parameters whose pending side-stream writes at return are reported."""
    kept: frozenset[str] = frozenset()
    """Those the caller is seen to keep as tensors: their pending reads at return are reported."""
    annotated: frozenset[str] = frozenset()
    """Parameters annotated as tensors: what their hazards assume."""
    streams: frozenset[str] = frozenset()
    """Every parameter's name: a stream the caller passed in is one it can join."""
    orders_after_default: bool = False
    """Whether a stream waits on `default_stream()` here: the caller's data are then its."""
    join: CallersJoin = NO_CALLERS
    """Whether every caller in the linted module joins a stream."""
    ordered: frozenset[str] = frozenset()
    """The streams every caller made wait for its stream before the call (lint/streamflow.py):
    what the caller wrote, and launched, there before it is ordered before them."""


NO_CALLER = Caller()
"""Before `produced_by_caller`: a module body, or a function run from what other methods leave."""
