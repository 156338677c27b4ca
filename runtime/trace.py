"""The trace format (JSON Lines, docs/trace-format.md): a writer that proxies a Tracker and
records each call, and `replay`, which reads a trace and makes the same calls. Live and replayed
runs go through the same engine methods, so a trace reproduces the live run's reports."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import IO, Any

from csan_lint.runtime.events import Access
from csan_lint.runtime.stacks import Frame, Stack, resolve

FORMAT = "csan-trace"
VERSION = 1
HEADER = {"format": FORMAT, "version": VERSION}

# Parameter types: int, int? (an integer or null), ptr and size (integers from 0 to 2**64 - 1: a
# device address, a byte count), bool, str, accesses ([{"ptr", "size", "is_write", "argument",
# "is_output"}, ...]), stack (optional: [[file, line, function], ...] or null).
EVENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "stream_created": (("stream", "int"),),
    "event_created": (("event", "int"),),
    "event_deleted": (("event", "int"),),
    "event_recorded": (("event", "int"), ("stream", "int")),
    "event_waited": (("event", "int"), ("stream", "int"), ("stack", "stack")),
    "stream_synchronized": (("stream", "int"),),
    "event_synchronized": (("event", "int"),),
    "device_synchronized": (),
    "stream_queried": (("stream", "int"), ("done", "bool")),
    "event_queried": (("event", "int"), ("done", "bool")),
    "allocated": (("ptr", "ptr"), ("size", "size"), ("stream", "int?"), ("stack", "stack")),
    "freed": (("ptr", "ptr"), ("stack", "stack")),
    "stream_recorded": (("ptr", "ptr"), ("stream", "int")),
    "kernel_launched": (("stream", "int"), ("operator", "str"), ("accesses", "accesses"), ("stack", "stack")),
    "host_accessed": (
        ("ptr", "ptr"),
        ("size", "size"),
        ("is_write", "bool"),
        ("operator", "str"),
        ("stack", "stack"),
    ),
    "capture_began": (("stream", "int"), ("stack", "stack")),
    "capture_ended": (("stream", "int"), ("stack", "stack")),
}
"""Every engine call, in the order of its parameters. `stack` parameters are optional."""


def json_key(param: str) -> str:
    """The line's key for a parameter: the event handle is "event_id", since "event" names the call."""
    return "event_id" if param == "event" else param


class TraceWriter:
    """Has the Tracker's methods: writes one JSON object per call, then forwards it to `tracker`
    (None: write only). `file` is a path or an open text file."""

    def __init__(self, tracker: Any, file: str | os.PathLike[str] | IO[str]) -> None:
        self.tracker = tracker
        if isinstance(file, (str, os.PathLike)):
            self._file: IO[str] = open(file, "w", encoding="utf-8")
            self._owned = True
        else:
            self._file = file
            self._owned = False
        self._write(HEADER)

    def _write(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")

    @staticmethod
    def _stack(stack: Stack | None) -> list[Frame] | None:
        """Frames serialize as [file, line, function] (a NamedTuple is a JSON array)."""
        return None if stack is None else resolve(stack)

    def _emit(self, event: str, params: tuple[tuple[str, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        values = dict(zip((name for name, _ in params), args, strict=False))  # the rest come as kwargs
        values.update(kwargs)
        record: dict[str, Any] = {"event": event}
        for name, kind in params:
            value = values.get(name)
            if kind == "stack":
                value = self._stack(value)
            elif kind == "accesses":
                value = None if value is None else [a._asdict() for a in value]
            record[json_key(name)] = value
        self._write(record)
        if self.tracker is not None:
            getattr(self.tracker, event)(*args, **kwargs)

    @property
    def errors(self) -> list[Any]:
        return self.tracker.errors if self.tracker is not None else []

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _forwarder(event: str, params: tuple[tuple[str, str], ...]) -> Callable[..., None]:
    def method(self: TraceWriter, *args: Any, **kwargs: Any) -> None:
        self._emit(event, params, args, kwargs)

    method.__name__ = method.__qualname__ = event
    method.__doc__ = f"Write a `{event}` line, then forward the call."
    return method


for _event, _params in EVENTS.items():
    setattr(TraceWriter, _event, _forwarder(_event, _params))


class TraceError(ValueError):
    """A bad trace, located: `trace.jsonl:12: unknown event 'foo'`."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


ADDRESS_LIMIT = 2**64
"""Pointers and sizes are 64-bit: a negative one, or one past this, is a corrupt trace (the
engine's range arithmetic would take it for a real, enormous range)."""


def _convert(kind: str, name: str, value: Any) -> Any:
    """The value as the engine takes it, or a ValueError saying what is wrong."""
    if kind in ("ptr", "size"):
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < ADDRESS_LIMIT:
            return value
        raise ValueError(f"{name!r} must be an integer from 0 to 2**64 - 1, got {_shown(value)}")
    if kind in ("int", "int?"):
        if (isinstance(value, int) and not isinstance(value, bool)) or (value is None and kind == "int?"):
            return value
        or_null = " or null" if kind == "int?" else ""
        raise ValueError(f"{name!r} must be an integer{or_null}, got {_shown(value)}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise ValueError(f"{name!r} must be true or false, got {json.dumps(value)}")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise ValueError(f"{name!r} must be a string, got {json.dumps(value)}")
    if kind == "stack":
        if value is None:
            return None
        if isinstance(value, list) and all(
            isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and isinstance(f[1], int) and isinstance(f[2], str)
            for f in value
        ):
            return tuple(Frame(*f) for f in value)
        raise ValueError(f"{name!r} must be a list of [file, line, function] or null")
    assert kind == "accesses", kind
    if not isinstance(value, list):
        raise ValueError(f"{name!r} must be a list of accesses")
    return [_access(i, a) for i, a in enumerate(value)]


def _shown(value: Any) -> str:
    """A bad value in a message, cut short: a corrupt trace may hold a megabyte on one line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _access(index: int, value: Any) -> Access:
    if not isinstance(value, dict):
        raise ValueError(f"access {index} must be an object")
    try:
        access = Access(
            _convert("ptr", "ptr", value.get("ptr")),
            _convert("size", "size", value.get("size")),
            _convert("bool", "is_write", value.get("is_write")),
            _convert("str", "argument", value.get("argument", "")),
            _convert("bool", "is_output", value.get("is_output", False)),
        )
        _check_end(access.ptr, access.size)
    except ValueError as error:
        raise ValueError(f"access {index}: {error}") from None
    return access


def _check_end(ptr: int, size: int) -> None:
    if ptr + size > ADDRESS_LIMIT:
        raise ValueError(f"'ptr' + 'size' ({ptr:#x} + {size}) runs past the 64-bit address space")


def replay(path: str | os.PathLike[str], tracker: Any) -> None:
    """Feed every event of the trace at `path` to `tracker`. Raises TraceError (located) on a
    bad line (binary, cut short, not JSON, out of range), after the events before it were fed;
    OSError if the file cannot be read."""
    shown = os.fspath(path)
    with open(path, "rb") as file:
        header_seen = False
        for lineno, data in enumerate(file, start=1):
            text = _text(shown, lineno, data)
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                cut = " (the trace is truncated: its last line is cut short)" if not data.endswith(b"\n") else ""
                raise TraceError(shown, lineno, f"not JSON: {error.msg} (column {error.colno}){cut}") from None
            except (ValueError, RecursionError) as error:  # a 5000-digit number, nesting 10**5 deep
                raise TraceError(shown, lineno, f"not a trace line: {str(error).splitlines()[0][:100]}") from None
            if not isinstance(record, dict):
                raise TraceError(shown, lineno, "expected a JSON object")
            if not header_seen:
                _check_header(shown, lineno, record)
                header_seen = True
                continue
            _dispatch(shown, lineno, record, tracker)
        if not header_seen:
            raise TraceError(shown, 1, f"empty trace: expected {json.dumps(HEADER)}")


def _text(path: str, lineno: int, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceError(
            path, lineno, f"not UTF-8 text at byte {error.start + 1}: a binary or compressed file, not a trace"
        ) from None


def _check_header(path: str, lineno: int, record: dict[str, Any]) -> None:
    if record.get("format") != FORMAT:
        raise TraceError(path, lineno, f"not a csan trace: the first line must be {json.dumps(HEADER)}")
    if record.get("version") != VERSION:
        raise TraceError(
            path, lineno, f"unsupported trace version {json.dumps(record.get('version'))} (this csan-lint reads {VERSION})"
        )


def _dispatch(path: str, lineno: int, record: dict[str, Any], tracker: Any) -> None:
    if "event" not in record:
        raise TraceError(path, lineno, "a line without 'event'")
    event = record["event"]
    params = EVENTS.get(event) if isinstance(event, str) else None
    if params is None:
        raise TraceError(path, lineno, f"unknown event {event!r}")
    kwargs = {}
    for name, kind in params:
        key = json_key(name)
        if key not in record and kind != "stack":
            raise TraceError(path, lineno, f"event {event!r} lacks {key!r}")
        try:
            kwargs[name] = _convert(kind, key, record.get(key))
        except ValueError as error:
            raise TraceError(path, lineno, f"event {event!r}: {error}") from None
    if "size" in kwargs:
        try:
            _check_end(kwargs["ptr"], kwargs["size"])
        except ValueError as error:
            raise TraceError(path, lineno, f"event {event!r}: {error}") from None
    getattr(tracker, event)(**kwargs)

