"""The trace format (JSON Lines, docs/trace-format.md): a writer that proxies a Tracker and
records each call, and `replay`, which reads a trace and makes the same calls. Live and replayed
runs go through the same engine methods, so a trace reproduces the live run's reports."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import IO, Any

from csan_lint.runtime.events import Access
from csan_lint.runtime.extents import Layout
from csan_lint.runtime.stacks import Frame, Stack, resolve

FORMAT = "csan-trace"
VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 has no layouts, extents or `blocking`: it reads as version 2 without them."""
HEADER = {"format": FORMAT, "version": VERSION}

# Parameter types: int, int? (an integer or null), stream0 (an optional stream id, absent: 0), ptr
# and size (integers from 0 to 2**64 - 1: a device address, a byte count), bool, flag (optional
# bool, absent: false), str, accesses ([{"ptr", "size", "is_write", "argument", "is_output", and
# optionally "element_size", "sizes", "strides"}, or with "extents" instead of "ptr" and "size",
# ...]), stack (optional: [[file, line, function], ...] or null).
EVENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "stream_created": (("stream", "int"), ("blocking", "flag"), ("default_stream", "stream0"), ("stack", "stack")),
    "event_created": (("event", "int"), ("stack", "stack")),
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
    "kernel_launched": (
        ("stream", "int"),
        ("operator", "str"),
        ("accesses", "accesses"),
        ("stack", "stack"),
        ("outside_capture", "flag"),
    ),
    "host_accessed": (
        ("ptr", "ptr"),
        ("size", "size"),
        ("is_write", "bool"),
        ("operator", "str"),
        ("stack", "stack"),
    ),
    "capture_began": (("stream", "int"), ("stack", "stack"), ("lenient", "flag")),
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

    def _emit(
        self, event: str, params: tuple[tuple[str, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        values = dict(zip((name for name, _ in params), args, strict=False))  # the rest come as kwargs
        values.update(kwargs)
        record: dict[str, Any] = {"event": event}
        for name, kind in params:
            value = values.get(name)
            if kind == "stack":
                value = self._stack(value)
            elif kind == "accesses":
                value = [_access_json(a) for a in values[name]]  # a required parameter: never absent
            elif (kind == "flag" and not value) or (kind == "stream0" and not value):
                continue  # absent means false, or the legacy default stream 0
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


def _access_json(access: Access) -> dict[str, Any]:
    ptr, size, is_write, argument, is_output, layout = access
    record = {"ptr": ptr, "size": size, "is_write": is_write, "argument": argument, "is_output": is_output}
    if layout is not None:
        record["element_size"], record["sizes"], record["strides"] = layout
    return record


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
    if kind == "flag" and value is None:
        return False
    if kind == "stream0":
        return _convert("int", name, 0 if value is None else value)
    if kind in ("bool", "flag"):
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
            isinstance(f, list)
            and len(f) == 3
            and isinstance(f[0], str)
            and isinstance(f[1], int)
            and isinstance(f[2], str)
            for f in value
        ):
            return tuple(Frame(*f) for f in value)
        raise ValueError(f"{name!r} must be a list of [file, line, function] or null")
    assert kind == "accesses", kind
    if not isinstance(value, list):
        raise ValueError(f"{name!r} must be a list of accesses")
    return [access for i, a in enumerate(value) for access in _accesses(i, a)]


def _shown(value: Any) -> str:
    """A bad value in a message, cut short: a corrupt trace may hold a megabyte on one line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _accesses(index: int, value: Any) -> list[Access]:
    """One trace access as the engine's: several when it lists its extents."""
    if not isinstance(value, dict):
        raise ValueError(f"access {index} must be an object")
    try:
        is_write = _convert("bool", "is_write", value.get("is_write"))
        argument = _convert("str", "argument", value.get("argument", ""))
        is_output = _convert("bool", "is_output", value.get("is_output", False))
        if "extents" in value:
            return [Access(ptr, size, is_write, argument, is_output) for ptr, size in _extents(value["extents"])]
        ptr = _convert("ptr", "ptr", value.get("ptr"))
        size = _convert("size", "size", value.get("size"))
        _check_end(ptr, size)
        return [Access(ptr, size, is_write, argument, is_output, _layout(value, size))]
    except ValueError as error:
        raise ValueError(f"access {index}: {error}") from None


def _check_end(ptr: int, size: int) -> None:
    if ptr + size > ADDRESS_LIMIT:
        raise ValueError(f"'ptr' + 'size' ({ptr:#x} + {size}) runs past the 64-bit address space")


def _extents(value: Any) -> list[tuple[int, int]]:
    if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 2 for e in value):
        raise ValueError("'extents' must be a list of [ptr, size]")
    extents = [(_convert("ptr", "ptr", ptr), _convert("size", "size", size)) for ptr, size in value]
    for ptr, size in extents:
        _check_end(ptr, size)
    return extents


def _naturals(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value):
        return tuple(value)
    raise ValueError(f"{name!r} must be a list of non-negative integers, got {json.dumps(value)}")


def _layout(value: dict[str, Any], size: int) -> Layout | None:
    """`element_size`, `sizes` and `strides`, all or none; `size` must be the layout's extent."""
    given = [key for key in ("element_size", "sizes", "strides") if key in value]
    if not given:
        return None
    if len(given) < 3:
        raise ValueError("'element_size', 'sizes' and 'strides' go together, got only " + ", ".join(map(repr, given)))
    item = _convert("int", "element_size", value["element_size"])
    if item <= 0:
        raise ValueError(f"'element_size' must be positive, got {item}")
    sizes, strides = _naturals("sizes", value["sizes"]), _naturals("strides", value["strides"])
    if len(sizes) != len(strides):
        raise ValueError(f"'sizes' and 'strides' differ in length ({len(sizes)} and {len(strides)})")
    extent = 0 if 0 in sizes else (sum((n - 1) * st for n, st in zip(sizes, strides, strict=True)) + 1) * item
    if extent != size:
        raise ValueError(f"'size' {size} is not the extent of its layout ({extent} bytes)")
    return item, sizes, strides


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
    if record.get("version") not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise TraceError(
            path,
            lineno,
            f"unsupported trace version {json.dumps(record.get('version'))} (this csan-lint reads {readable})",
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
        if key not in record and kind not in ("stack", "flag", "stream0"):
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
