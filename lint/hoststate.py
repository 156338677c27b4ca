"""The state of the host-side interpreter (lint/hostflow.py): the non-blocking copies still
pending into or out of host buffers, the ordering tokens whose host sync covers each, events
not yet recorded, and the graph capture running; and how states join.

Branches join by union of what is pending and intersection of what orders it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import libcst as cst

from csan_lint.lint.analysis.tokens import CURRENT, UNKNOWN
from csan_lint.lint.recognize import join_contexts

CAPTURE = "<capture>"
"""The side stream `torch.cuda.graph` captures on when given none."""


@dataclass(frozen=True)
class Copy:
    node: cst.CSTNode
    stream: str


@dataclass(frozen=True)
class Pending:
    copy: Copy
    after: frozenset[str]
    """Tokens whose host sync orders the host after the copy: streams and `event:e`."""


@dataclass(frozen=True)
class Block:
    """A side stream block entered during a capture."""

    item: cst.CSTNode
    node: cst.With
    stream: str
    forked: bool


@dataclass(frozen=True)
class Capture:
    stream: str
    forked: frozenset[str] = frozenset()
    """Side streams ordered after the capture stream since the capture began."""
    blocks: frozenset[Block] = frozenset()
    joined: frozenset[Block] = frozenset()
    events: frozenset[tuple[str, str]] = frozenset()
    """(event, stream) recorded during the capture, for event-based forks and joins."""


@dataclass
class HostState:
    current: str = CURRENT
    streams: dict[str, str] = field(default_factory=dict)
    contexts: dict[str, str] = field(default_factory=dict)
    """Names bound to `torch.cuda.stream(s)` objects -> the stream their `with` makes current."""
    into: dict[str, frozenset[Pending]] = field(default_factory=dict)
    """Host buffer -> device-to-host copies that may still be writing it."""
    unplaced: dict[str, frozenset[Pending]] = field(default_factory=dict)
    """Name -> non-blocking copies into it to a place the code does not say (`x.to(dev,
    non_blocking=True)`): downloads only where it turns out to be host memory (a method only
    host tensors have is called on it, `pin_memory()`), which reads it there and then."""
    out_of: dict[str, frozenset[Pending]] = field(default_factory=dict)
    """Pinned host buffer -> host-to-device copies that may still be reading it."""
    pinned: frozenset[str] = frozenset()
    on_host: frozenset[str] = frozenset()
    """Names of host memory, or of the host as a device (`torch.device("cpu")`), on some path
    (lint/devices.py): a non-blocking copy to where one says may be a download."""
    unrecorded: frozenset[str] = frozenset()
    true: frozenset[str] = frozenset()
    """Names that hold `True` on some path: a parameter some call of the function passes `True`
    (or that defaults to it), a name bound to it. `non_blocking=name` may then not block."""
    capture: Capture | None = None
    views: dict[str, str] = field(default_factory=dict)
    """Local name -> the buffer it is a view of on every path (`cpu = self.buf[:n]`): a copy out
    of the view is one out of the buffer, which the next call of the function meets."""

    def forget(self, key: str) -> None:
        """`key` is bound anew: nothing known of its old value holds."""
        self.into.pop(key, None)
        self.unplaced.pop(key, None)
        self.out_of.pop(key, None)
        self.streams.pop(key, None)
        self.contexts.pop(key, None)
        self.pinned -= {key}
        self.on_host -= {key}
        self.unrecorded -= {key}
        self.true -= {key}
        self.views = {view: base for view, base in self.views.items() if key not in (view, base)}

    def copy(self) -> HostState:
        return replace(
            self,
            streams=dict(self.streams),
            contexts=dict(self.contexts),
            into=dict(self.into),
            unplaced=dict(self.unplaced),
            out_of=dict(self.out_of),
            views=dict(self.views),
        )


def _join_pending(a: frozenset[Pending], b: frozenset[Pending]) -> frozenset[Pending]:
    by_copy = {pending.copy: pending for pending in a}
    for pending in b:
        other = by_copy.get(pending.copy)
        by_copy[pending.copy] = pending if other is None else Pending(pending.copy, pending.after & other.after)
    return frozenset(by_copy.values())


def _join_maps(a: dict[str, frozenset[Pending]], b: dict[str, frozenset[Pending]]) -> dict[str, frozenset[Pending]]:
    joined = dict(a)
    for key, pending in b.items():
        joined[key] = _join_pending(joined[key], pending) if key in joined else pending
    return joined


def _join_capture(a: Capture | None, b: Capture | None) -> Capture | None:
    if a is None or b is None or a.stream != b.stream:
        return a or b
    return Capture(a.stream, a.forked & b.forked, a.blocks | b.blocks, a.joined & b.joined, a.events & b.events)


def join_host_states(states: Iterable[HostState | None]) -> HostState | None:
    live = [state for state in states if state is not None]
    if not live:
        return None
    result = live[0].copy()
    for state in live[1:]:
        if state.current != result.current:
            result.current = UNKNOWN
        result.streams = {k: v for k, v in result.streams.items() if state.streams.get(k) == v}
        result.views = {k: v for k, v in result.views.items() if state.views.get(k) == v}
        result.contexts = join_contexts(result.contexts, state.contexts)
        result.into = _join_maps(result.into, state.into)
        result.unplaced = _join_maps(result.unplaced, state.unplaced)
        result.out_of = _join_maps(result.out_of, state.out_of)
        result.pinned &= state.pinned
        result.on_host |= state.on_host
        result.unrecorded |= state.unrecorded
        result.true |= state.true
        result.capture = _join_capture(result.capture, state.capture)
    return result


def update_pending(pendings: dict[str, frozenset[Pending]], when: str | None, token: str) -> None:
    """Adds `token` to the copies ordered before `when` (all of them if `when` is None)."""
    for key, marks in pendings.items():
        pendings[key] = frozenset(
            Pending(p.copy, p.after | {token}) if when is None or when in p.after else p for p in marks
        )


def drop_pending(pendings: dict[str, frozenset[Pending]], token: str | None) -> None:
    """The host synced with `token` (every copy if None): the copies it covers are done."""
    for key in list(pendings):
        left = frozenset(p for p in pendings[key] if token is not None and token not in p.after)
        if left:
            pendings[key] = left
        else:
            del pendings[key]


def forget_token(pendings: dict[str, frozenset[Pending]], token: str) -> None:
    """Re-recording an event replaces what it captured."""
    for key, marks in pendings.items():
        pendings[key] = frozenset(Pending(p.copy, p.after - {token}) for p in marks)
