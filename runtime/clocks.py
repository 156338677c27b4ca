"""The ordering half of the happens-before engine (tracker.py's base): which work is known to be
complete before which, from stream creations, events, syncs, queries and graph captures. Torch-free.

Clocks. Every launch takes the next global sequence number `seq`; a stream's clock maps each
stream to the last `seq` of that stream known to be complete before the stream's next work.
An access (stream p, seq n) is ordered before stream t's current work iff clock[t][p] >= n.
The host has a clock too (id HOST): syncs join into it, and since the host issues every launch,
each stream joins the host clock before its next work. That join is lazy (a version number),
so a sync costs O(streams) once and a launch stays O(1).

Blocking streams (an `ExternalStream` over a stream created with default flags) synchronize with
the legacy default stream: a launch on one waits for the default stream's work so far, and a
launch on the default stream waits for every blocking stream's.
"""

from __future__ import annotations

from csan_lint.runtime import kinds
from csan_lint.runtime.capture import CAPTURE_BEGIN_OPERATOR, GraphCapture
from csan_lint.runtime.cells import Clock
from csan_lint.runtime.cuda_semantics import UNRECORDED_EVENT
from csan_lint.runtime.events import DEFAULT_STREAM, AccessRecord
from csan_lint.runtime.reports import Reports
from csan_lint.runtime.stacks import EMPTY_STACK, Stack

WAIT_EVENT_OPERATOR = "wait_event"


class _Stream:
    __slots__ = ("clock", "host_version")

    def __init__(self) -> None:
        self.clock: Clock = {}
        self.host_version = -1  # joins the host clock before its first work


class Clocks:
    """Vector clocks of the streams, the host and the recorded events; the errors of ordering
    alone (a wait on a never-recorded event, a capture's unjoined fork) go to `Reports`."""

    def __init__(self) -> None:
        self._seq = 0
        self._streams: dict[int, _Stream] = {DEFAULT_STREAM: _Stream()}
        self._host: Clock = {}
        self._host_version = 0
        self._events: dict[int, Clock | None] = {}  # None: created, never recorded
        self._capture: GraphCapture | None = None
        # Streams that synchronize with the legacy default stream, each with its device's
        # (one per device: stream_created's `default_stream`), and those default streams.
        self._blocking: dict[int, int] = {}
        self._legacy_defaults: set[int] = set()
        self._reports = Reports()
        self._errors = self._reports.errors
        self.reported = self._reports.reported
        """Keys (sites, kind) of the errors reported so far: each is reported once. A driver
        clears it to have them reported again (the pytest plugin, at each test)."""
        self.stream_sites = self._reports.stream_sites
        self.event_sites = self._reports.event_sites

    # -- streams and events ---------------------------------------------------------------

    def _clock(self, stream: int) -> Clock:
        """The stream's clock, created if unseen (backfill) and caught up with the host's."""
        state = self._streams.get(stream)
        if state is None:
            state = self._streams[stream] = _Stream()
        if state.host_version != self._host_version:
            self._join(state.clock, self._host)
            state.host_version = self._host_version
        return state.clock

    @staticmethod
    def _join(into: Clock, other: Clock) -> bool:
        changed = False
        for stream, seq in other.items():
            if into.get(stream, 0) < seq:
                into[stream] = seq
                changed = True
        return changed

    def _host_join(self, clock: Clock) -> None:
        if self._join(self._host, clock):
            self._host_version += 1

    def stream_created(
        self, stream: int, blocking: bool = False, default_stream: int = DEFAULT_STREAM, stack: Stack | None = None
    ) -> None:
        """A duplicate creation keeps the stream's clock (pool handles repeat) and takes the new
        `blocking`: whether it synchronizes with the legacy default stream of its device,
        `default_stream` (each device has its own: cuda_semantics.LEGACY_DEFAULT_STREAM_PER_DEVICE),
        and the new `stack` (where the user made it, for reports)."""
        if stack:
            self.stream_sites[stream] = stack
        if stream not in self._streams:
            self._streams[stream] = _Stream()
        if blocking and stream != default_stream:
            self._blocking[stream] = default_stream
        else:
            self._blocking.pop(stream, None)
        self._legacy_defaults = set(self._blocking.values())

    def _legacy_sync(self, stream: int, clock: Clock) -> None:
        """A launch on the default stream waits for the blocking streams' work, and a launch on a
        blocking stream for the default stream's."""
        default = self._blocking.get(stream)
        if default is None:  # a default stream: its device's blocking streams
            for blocking, its_default in self._blocking.items():
                if its_default == stream:
                    self._join(clock, self._clock(blocking))
        else:
            self._join(clock, self._clock(default))

    def event_created(self, event: int, stack: Stack | None = None) -> None:
        """A duplicate creation means the deletion was missed: the event starts unrecorded again."""
        self._events[event] = None
        if stack:
            self.event_sites[event] = stack

    def event_deleted(self, event: int) -> None:
        self._events.pop(event, None)
        self.event_sites.pop(event, None)  # a later event may get the handle

    def event_recorded(self, event: int, stream: int) -> None:
        capture = self._capture
        if capture is not None and stream in capture.clocks:
            capture.events[event] = dict(capture.clocks[stream])  # a graph node, not a live record
            return
        self._events[event] = dict(self._clock(stream))

    def event_waited(self, event: int, stream: int, stack: Stack | None = None) -> None:
        """`stream` waits for `event`; a never-recorded event orders nothing (reported as a warning);
        an event this engine never heard of was recorded before it began (cuda_semantics)."""
        capture = self._capture
        if capture is not None and event in capture.events:
            # A graph edge: `stream` joins the graph (or joins back), ordered after the node.
            self._join(capture.clocks.setdefault(stream, {}), capture.events[event])
            return
        if event != UNRECORDED_EVENT and event not in self._events:
            # Recorded before this engine began (before the sanitizer's enable() or restart()):
            # CUDA names an event only once recorded (UNRECORDED_EVENT until then), so this is no
            # wait-unrecorded; it orders the waiter after work this engine never saw.
            return
        snapshot = self._events.get(event)
        if snapshot is None:
            current = AccessRecord(stream, WAIT_EVENT_OPERATOR, "", False, stack or EMPTY_STACK)
            self._reports.report(kinds.WAIT_UNRECORDED_EVENT, current, None)
            return
        self._join(self._clock(stream), snapshot)

    def stream_synchronized(self, stream: int) -> None:
        self._host_join(self._clock(stream))

    def event_synchronized(self, event: int) -> None:
        snapshot = self._events.get(event)
        if snapshot is not None:
            self._host_join(snapshot)

    def device_synchronized(self) -> None:
        for stream in list(self._streams):
            self._host_join(self._clock(stream))

    def stream_queried(self, stream: int, done: bool) -> None:
        """A query that answers True orders the host after the stream's work, like a sync."""
        if done:
            self.stream_synchronized(stream)

    def event_queried(self, event: int, done: bool) -> None:
        if done:
            self.event_synchronized(event)

    def _issue_clock(self, stream: int) -> Clock:
        """What `stream`'s next work is ordered after: its clock, joined for a blocking stream (or
        the default one) with the legacy default stream's ordering (a copy then)."""
        clock = self._clock(stream)
        if self._blocking and (stream in self._legacy_defaults or stream in self._blocking):
            clock = dict(clock)
            self._legacy_sync(stream, clock)
        return clock

    # -- CUDA graph capture -----------------------------------------------------------------------

    def capture_began(self, stream: int, stack: Stack | None = None, lenient: bool = False) -> None:
        """Capture on the default stream fails in CUDA; elsewhere, a capture begins on `stream`.
        `lenient`: a thread-local or relaxed capture, where launches on streams outside the
        graph are the program's live work, not a side stream it forgot to fork."""
        if stream == DEFAULT_STREAM:
            current = AccessRecord(stream, CAPTURE_BEGIN_OPERATOR, "", False, stack or EMPTY_STACK)
            self._reports.report(kinds.CAPTURE_ON_DEFAULT_STREAM, current, None)
            return
        self._seq += 1
        self._clock(stream)[stream] = self._seq
        self._capture = GraphCapture(stream, self._seq, stack, lenient)

    def capture_ended(self, stream: int, stack: Stack | None = None) -> None:
        capture = self._capture
        if capture is None:
            return  # its begin failed (default stream) and was reported then
        self._capture = None
        for current, previous in capture.ended(stream, stack):
            self._reports.report(kinds.UNJOINED_CAPTURE_FORK, current, previous)
