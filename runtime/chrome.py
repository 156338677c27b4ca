"""A picture of a run: the engine's events as a Chrome Trace Event Format document (what
chrome://tracing and ui.perfetto.dev open, as they open `torch.profiler` traces).

One track (tid) per stream and one for the host, in process 1. Kernels and host accesses are
complete slices ("ph": "X") named by operator, with the user frame in their args; memory,
event and capture calls are slices too (flows bind to slices). An event's record and each wait
on it are joined by a flow arrow ("ph": "s" -> "f"), as is a stream or event synchronize with
the work it waited for; each race is a marked pair: an instant ("ph": "i", category "race") on
both accesses and a flow from the earlier access to the later one. Tracks are named by stream
(`stream created at model.py:12 (side)`), through thread_name metadata ("ph": "M").

The emulated device has no clock, and a trace holds none: timestamps are the engine's order,
one microsecond per engine call (`ts` = the call's position in the trace), every slice 1 long.
Read left to right it is the order the host issued the work, not how long anything took.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from csan_lint.runtime.events import DEFAULT_STREAM, HOST, RuntimeErrorReport
from csan_lint.runtime.report import message, placed_frame, stream_name
from csan_lint.runtime.stacks import Frame, Stack, resolve
from csan_lint.runtime.trace import EVENTS, TraceError, replay
from csan_lint.runtime.tracker import Tracker

PID = 1
SLICE = 1
"""Every slice lasts one tick: the emulated device has no timing."""
CATEGORIES = ("kernel", "host", "memory", "sync", "graph", "race")

_Key = tuple[int, str, tuple[Frame, ...]]
"""A launch as a report names it: (stream, operator, frames)."""


def _short(operator: str) -> str:
    return operator.split("(", 1)[0].strip() or "?"


def _where(stack: Stack | None) -> str | None:
    frame = placed_frame(stack or ())
    return f"{frame.filename}:{frame.lineno}" if frame else None


class ChromeTrace:
    """Has the Tracker's methods: forwards each call to `tracker` and draws it. `document()`
    is the Chrome trace of what was drawn, with the tracker's reports as races."""

    def __init__(self, tracker: Tracker | None = None, title: str = "csan-lint") -> None:
        self.tracker = tracker or Tracker()
        self.title = title
        self.events: list[dict[str, Any]] = []
        self._tick = 0
        self._tids: dict[int, int] = {HOST: 0, DEFAULT_STREAM: 1}
        self._recorded: dict[int, tuple[int, int]] = {}  # event -> (ts, tid) of its last record
        self._last: dict[int, int] = {}  # stream -> ts of its last slice
        self._launches: dict[_Key, int] = {}  # the latest ts of each launch, to find a race's other side
        self._flows = 0
        self._seen_errors = 0

    # -- drawing ----------------------------------------------------------------------

    def _tid(self, stream: int | None) -> int:
        key = HOST if stream is None else stream
        if key not in self._tids:
            self._tids[key] = len(self._tids)
        return self._tids[key]

    def _slice(self, track: int | None, name: str, category: str, /, **args: Any) -> tuple[int, int]:
        tid = self._tid(track)
        shown = {key: value for key, value in args.items() if value is not None}
        self.events.append(
            {"ph": "X", "name": name, "cat": category, "pid": PID, "tid": tid, "ts": self._tick, "dur": SLICE}
            | ({"args": shown} if shown else {})
        )
        if track is not None:
            self._last[track] = self._tick
        return self._tick, tid

    def _flow(self, name: str, category: str, start: tuple[int, int], end: tuple[int, int]) -> None:
        """An arrow from the slice at `start` (ts, tid) to the slice at `end`."""
        self._flows += 1
        common = {"name": name, "cat": category, "pid": PID, "id": self._flows}
        self.events.append({"ph": "s", "ts": start[0], "tid": start[1], **common})
        self.events.append({"ph": "f", "bp": "e", "ts": end[0], "tid": end[1], **common})

    def _mark(self, at: tuple[int, int], name: str, category: str, **args: Any) -> None:
        """An instant on a track. Flow ends bind to it too: Chrome DevTools binds a flow event
        only to an event of its own category at its `ts` (Perfetto to the enclosing slice)."""
        self.events.append(
            {"ph": "i", "s": "t", "name": name, "cat": category, "pid": PID, "tid": at[1], "ts": at[0]}
            | ({"args": args} if args else {})
        )

    def _event_name(self, event: int) -> str:
        where = _where(self.tracker.event_sites.get(event))
        return f"event created at {os.path.basename(where)}" if where else f"event {event}"

    # -- the engine's calls --------------------------------------------------------------

    def _draw(self, call: str, values: dict[str, Any]) -> tuple[int, int] | None:
        """The slice of one call (its (ts, tid)), with its arrows; None for calls that draw none."""
        given = values.get("stream")
        stream: int = HOST if given is None else given  # no stream (pinned memory, frees): the host
        stack = values.get("stack")
        if call == "kernel_launched":
            operator = values["operator"]
            at = self._slice(stream, _short(operator), "kernel", operator=operator, frame=_where(stack))
            self._launches[(stream, operator, tuple(resolve(stack)))] = at[0]
            return at
        if call == "host_accessed":
            operator = values["operator"]
            at = self._slice(HOST, _short(operator), "host", operator=operator, frame=_where(stack))
            self._launches[(HOST, operator, tuple(resolve(stack)))] = at[0]
            return at
        if call == "event_recorded":
            at = self._slice(stream, "record event", "sync", event=self._event_name(values["event"]))
            self._recorded[values["event"]] = at
            return at
        if call == "event_waited":
            event = values["event"]
            at = self._slice(stream, "wait event", "sync", event=self._event_name(event), frame=_where(stack))
            if event in self._recorded:
                self._flow(self._event_name(event), "sync", self._recorded[event], at)
            return at
        if call in ("stream_synchronized", "stream_queried"):
            before = self._last.get(stream)
            name = "synchronize stream" if call == "stream_synchronized" else "query stream"
            at = self._slice(HOST, name, "sync", stream=self._stream_label(stream), done=values.get("done"))
            if before is not None and values.get("done", True):
                waited = (before, self._tid(stream))
                self._mark(waited, "the host waits for this", "sync")  # a `sync` end for the arrow
                self._flow(name, "sync", waited, at)
            return at
        if call in ("event_synchronized", "event_queried"):
            event = values["event"]
            name = "synchronize event" if call == "event_synchronized" else "query event"
            at = self._slice(HOST, name, "sync", event=self._event_name(event), done=values.get("done"))
            if event in self._recorded and values.get("done", True):
                self._flow(name, "sync", self._recorded[event], at)
            return at
        if call == "device_synchronized":
            return self._slice(HOST, "synchronize device", "sync")
        if call == "allocated":
            return self._slice(stream, "allocate", "memory", ptr=hex(values["ptr"]), size=values["size"])
        if call == "freed":
            return self._slice(HOST, "free", "memory", ptr=hex(values["ptr"]), frame=_where(stack))
        if call == "stream_recorded":
            return self._slice(stream, "record_stream", "memory", ptr=hex(values["ptr"]))
        if call in ("capture_began", "capture_ended"):
            name = "graph capture begins" if call == "capture_began" else "graph capture ends"
            return self._slice(stream, name, "graph", frame=_where(stack))
        return None  # creations and deletions: a track appears with a stream's first slice

    def _call(self, call: str, values: dict[str, Any]) -> None:
        self._tick += 1
        getattr(self.tracker, call)(**values)
        at = self._draw(call, values)
        errors = self.tracker.errors
        for report in errors[self._seen_errors :]:
            self._race(report, at)
        self._seen_errors = len(errors)

    def _race(self, report: RuntimeErrorReport, at: tuple[int, int] | None) -> None:
        """Both accesses marked; an arrow from the earlier one (found among the launches by
        stream, operator and stack) to the one that raced."""
        if at is None:
            return
        text = message(report)
        self._mark(at, report.kind, "race", message=text, access="current")
        previous = report.previous
        if previous is None:
            return
        key = (previous.stream, previous.operator, tuple(resolve(previous.stack)))
        ts = self._launches.get(key)
        if ts is not None:
            earlier = (ts, self._tid(previous.stream))
            self._mark(earlier, report.kind, "race", message=text, access="previous")
            self._flow(report.kind, "race", earlier, at)

    # -- the document ------------------------------------------------------------------

    def _stream_label(self, stream: int | None) -> str:
        if stream is None or stream == HOST:
            return "host"
        return stream_name(stream, self.tracker.stream_sites)

    def document(self) -> dict[str, Any]:
        names = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": self.title}}]
        for stream, tid in sorted(self._tids.items(), key=lambda item: item[1]):
            label = self._stream_label(stream)
            names.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": label}})
            names.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid, "args": {"sort_index": tid}})
        return {
            "traceEvents": names + self.events,
            "otherData": {
                "producer": "csan-lint",
                "timestamps": "engine order: one microsecond per engine call, not real time",
                "races": len([r for r in self.tracker.errors if r.severity == "error"]),
            },
        }


def _caller(call: str) -> Callable[..., None]:
    params = [name for name, _ in EVENTS[call]]

    def method(self: ChromeTrace, *args: Any, **kwargs: Any) -> None:
        self._call(call, {**dict(zip(params, args, strict=False)), **kwargs})

    method.__name__ = method.__qualname__ = call
    method.__doc__ = f"Forward `{call}` to the tracker and draw it."
    return method


for _call_name in EVENTS:
    setattr(ChromeTrace, _call_name, _caller(_call_name))


def from_trace(path: str | os.PathLike[str]) -> ChromeTrace:
    """The picture of a JSON Lines trace (raises trace.TraceError, OSError as `replay` does)."""
    picture = ChromeTrace(title=f"csan-lint: {os.path.basename(os.fspath(path))}")
    replay(path, picture)
    return picture


def write(picture: ChromeTrace, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as file:
        json.dump(picture.document(), file, separators=(",", ":"))


class TraceOut:
    """`--trace-out PATH` of a live run: the engine's trace written as the run goes, then, at
    `close`, the Chrome trace at PATH. A PATH ending in `.jsonl` keeps the JSON Lines trace
    itself (what `csan-lint --replay` reads) and draws nothing."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.lines = self.path if self.path.endswith(".jsonl") else f"{self.path}.part.jsonl"
        self.file = open(self.lines, "w", encoding="utf-8")

    def close(self) -> str | None:
        """Draws the picture from the finished trace (a run cut short has a trace cut short:
        it is drawn up to its last whole line). Never raises: what went wrong is returned (the
        JSON Lines trace is then kept beside PATH), for the run to warn about."""
        self.file.close()
        if self.lines == self.path:
            return None
        picture = ChromeTrace(title=f"csan-lint: {os.path.basename(self.path)}")
        try:
            try:
                replay(self.lines, picture)
            except TraceError:
                pass  # drawn up to the bad line: a picture of what ran
            write(picture, self.path)
        except Exception as error:  # a bug of ours must not break the run it drew
            return f"cannot draw {self.path}: {type(error).__name__}: {error} (the trace is kept in {self.lines})"
        os.unlink(self.lines)
        return None
