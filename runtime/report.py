"""Runtime error reports as text (in the spirit of CSAN's) and JSON. Stacks are resolved here,
only when a report is shown; the user's frames are shown, torch's and our own are hidden."""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Mapping
from typing import Any

from csan_lint.runtime import kinds
from csan_lint.runtime.capture import CAPTURE_BEGIN_OPERATOR, CAPTURE_END_OPERATOR
from csan_lint.runtime.events import (
    DEFAULT_STREAM,
    HOST,
    AccessRecord,
    RuntimeErrorReport,
)
from csan_lint.runtime.stacks import (
    Frame,
    Stack,
    innermost_user_frame,
    is_user_file,
    resolve,
    user_frames,
    wrapper_frames,
)
from csan_lint.runtime.tracker import ALLOCATION_OPERATOR, FREE_OPERATOR, REALLOCATION_OPERATOR

Sites = Mapping[int, Stack]
"""Stream -> the stack that created it (`RuntimeErrorReport.stream_sites`)."""

_ASSIGNED = re.compile(r"\s*([A-Za-z_][\w.]*(?:\[[^\]=]*\])?)\s*(?::[^=]*)?=(?!=)")
"""The target of an assignment at the start of a line: `self.prefetch_stream = ...`, `s: Stream = ...`."""


def creation_site(stream: int | None, sites: Sites | None) -> tuple[Frame, str] | None:
    """Where a stream was made, as the user wrote it: the innermost user frame of its creation
    (a decorator's wrapper skipped) and the name the line assigns it ("" when none)."""
    stack = (sites or {}).get(stream) if stream is not None else None
    frame = innermost_user_frame(stack) if stack else None
    if frame is None:
        return None
    assigned = _ASSIGNED.match(linecache.getline(frame.filename, frame.lineno))
    return frame, assigned.group(1) if assigned else ""


def stream_name(stream: int | None, sites: Sites | None = None) -> str:
    """`the default stream`, `stream created at cache_utils.py:1588 (self.prefetch_stream)`, or
    the handle (`stream 32`) when its creation was not seen in user code."""
    if stream is None:
        return "an unknown stream"
    if stream == HOST:
        return "the host"
    if stream == DEFAULT_STREAM:
        return "the default stream"
    site = creation_site(stream, sites)
    if site is None:
        return f"stream {stream}"
    frame, name = site
    return f"stream created at {os.path.basename(frame.filename)}:{frame.lineno}" + (f" ({name})" if name else "")


def _short(operator: str) -> str:
    """An operator schema cut to its name: `aten::mul.Tensor(Tensor self, ...)` -> `aten::mul.Tensor`."""
    return operator.split("(", 1)[0].strip() or "?"


def placed_frame(stack: Stack) -> Frame | None:
    """The frame a report points at: the innermost user frame that is not a decorator's
    wrapper; the innermost frame when none is the user's (better than nothing)."""
    frame = innermost_user_frame(stack)
    if frame is None:
        frames = resolve(stack)
        frame = frames[-1] if frames else None
    return frame


def placement(report: RuntimeErrorReport) -> tuple[str, Frame | None]:
    """Where the user can act on the report: ("current" or "previous", its frame). The racing
    access (`current`), but for a free made by library code (the innermost frame of the free is
    not the user's: autograd freeing a gradient during `loss.backward()`, say) the use it
    freed memory under (`previous`: a backward hook's copy), which is where the user records
    or waits."""
    previous = report.previous
    if report.kind == kinds.FREE_IN_USE and previous is not None:
        frames = resolve(report.current.stack)
        if (not frames or not is_user_file(frames[-1].filename)) and innermost_user_frame(previous.stack):
            return "previous", placed_frame(previous.stack)
    return "current", placed_frame(report.current.stack)


def _at(record: AccessRecord) -> str:
    """The frame a report points at, when known: " at model.py:44", else ""."""
    frame = placed_frame(record.stack)
    return f" at {frame.filename}:{frame.lineno}" if frame else ""


def _access_site(record: AccessRecord, sites: Sites) -> str:
    """`op` at the frame a report points at, on its stream: "`aten::mul` at model.py:44 on
    stream created at model.py:12 (side)"."""
    return f"`{_short(record.operator)}`{_at(record)} on {stream_name(record.stream, sites)}"


def message(report: RuntimeErrorReport) -> str:
    """One line that says what happened."""
    cur, prev = report.current, report.previous
    kind = report.kind
    sites = dict(report.stream_sites)
    on_current = stream_name(cur.stream, sites)
    on_previous = stream_name(prev.stream, sites) if prev is not None else ""
    if kind == kinds.CAPTURE_ON_DEFAULT_STREAM:
        return "CUDA graph capture begun on the default stream (capture needs a side stream)"
    if kind == kinds.WAIT_UNRECORDED_EVENT:
        return f"{on_current} waits on an event that was never recorded: the wait orders nothing"
    assert prev is not None, kind
    if kind == kinds.UNJOINED_CAPTURE_FORK:
        if cur.operator == CAPTURE_END_OPERATOR and prev.operator == CAPTURE_BEGIN_OPERATOR:
            return f"CUDA graph capture begun on {on_previous} ended on {on_current}"
        if cur.operator == CAPTURE_END_OPERATOR:
            return (
                f"{_access_site(prev, sites)} during CUDA graph capture is not joined back to the capture stream "
                f"({on_current}) before the capture ends"
            )
        return (
            f"{_access_site(cur, sites)} during CUDA graph capture on {on_previous} "
            "is not forked from the capture stream"
        )
    if kind == kinds.FREE_IN_USE:
        again = report.reallocation
        reused = (
            f" and handed out again to an allocation on {stream_name(again.stream, sites)}{_at(again)}"
            if again is not None
            else ""
        )
        return (
            f"a block allocated on {on_current} is freed{_at(cur)}{reused} while {_access_site(prev, sites)} "
            "may still use it (no record_stream, no ordering before the reuse)"
        )
    if prev.operator == ALLOCATION_OPERATOR:
        return (
            f"{_access_site(cur, sites)} uses a block allocated on {on_previous} without being ordered after "
            "that stream's earlier work: the caching allocator may have handed out memory that work still uses "
            "(the hazard is the block's reuse)"
        )
    verbs = {
        kinds.READ_AFTER_WRITE: ("reads", "writing"),
        kinds.WRITE_AFTER_READ: ("overwrites", "reading"),
        kinds.WRITE_AFTER_WRITE: ("overwrites", "writing"),
        kinds.HOST_READ_PENDING: ("reads", "writing"),
        kinds.HOST_WRITE_PENDING: ("overwrites", "reading" if not prev.is_write else "writing"),
    }
    verb, pending = verbs.get(kind, ("accesses", "using"))
    return f"{_access_site(cur, sites)} {verb} memory that {_access_site(prev, sites)} may still be {pending}"


def _format_stack(stack: Stack) -> list[str]:
    frames = resolve(stack)
    shown = user_frames(frames)
    lines = []
    for frame in shown:
        lines.append(f'    File "{frame.filename}", line {frame.lineno}, in {frame.function}')
        source = linecache.getline(frame.filename, frame.lineno).strip()
        if source:
            lines.append(f"      {source}")
    hidden = len(frames) - len(shown)
    if not frames:
        lines.append("    (no stack recorded)")
    elif not shown:
        lines.append(f"    (no user frames; {hidden} library frames hidden)")
    return lines


def _describe(record: AccessRecord, is_memory: bool, label: str, sites: Sites) -> str:
    operator = _short(record.operator)
    stream = stream_name(record.stream, sites)
    if record.operator == FREE_OPERATOR:
        return f"Freed for reuse on {stream}"
    if record.operator == REALLOCATION_OPERATOR:
        return f"{label}: allocated again on {stream}"
    if record.operator == ALLOCATION_OPERATOR:
        return f"{label}: allocated on {stream}, reusing a block its earlier work may still use"
    if not is_memory:
        return f"{label}: `{operator}` on {stream}"
    action = "writing" if record.is_write else "reading"
    argument = f" argument `{record.argument}` of" if record.argument else " in"
    return f"{label}: {stream}, {action}{argument} `{operator}`"


def render_text(report: RuntimeErrorReport) -> str:
    """A multi-line report: what happened, both accesses with their stacks, the allocation."""
    is_memory = report.allocation is not None
    sites = dict(report.stream_sites)
    lines = [f"csan: {report.kind}: {message(report)}"]
    lines.append(f"  {_describe(report.current, is_memory, 'Access' if is_memory else 'At', sites)}, from:")
    lines += _format_stack(report.current.stack)
    if report.previous is not None:
        label = "Previous access" if is_memory else "Previously"
        lines.append(f"  {_describe(report.previous, is_memory, label, sites)}, from:")
        lines += _format_stack(report.previous.stack)
    if report.reallocation is not None:
        lines.append(f"  {_describe(report.reallocation, is_memory, 'Reallocation', sites)}, from:")
        lines += _format_stack(report.reallocation.stack)
    allocation = report.allocation
    if allocation is not None:
        lines.append(
            f"  Memory: {allocation.size} bytes at {allocation.ptr:#x},"
            f" allocated on {stream_name(allocation.stream, sites)}, from:"
            if allocation.stack
            else f"  Memory: {allocation.size} bytes at {allocation.ptr:#x} (its allocation was not seen)"
        )
        if allocation.stack:
            lines += _format_stack(allocation.stack)
    return "\n".join(lines)


def _stack_json(stack: Stack) -> list[dict[str, Any]]:
    """The shown frames; a decorator's wrapper (`stacks.forwards`) carries `"wrapper": true`:
    reports are placed past it."""
    frames = resolve(stack)
    wrappers = wrapper_frames(stack)
    shown = [(f, w) for f, w in zip(frames, wrappers, strict=True) if is_user_file(f.filename)] or [
        (f, w) for f, w in zip(frames, wrappers, strict=True)
    ]
    return [
        {"file": f.filename, "line": f.lineno, "function": f.function, **({"wrapper": True} if w else {})}
        for f, w in shown
    ]


def _created_json(stream: int | None, sites: Sites) -> dict[str, Any] | None:
    """Where the stream was made, for machines: file, line, function and the assigned name."""
    site = creation_site(stream, sites)
    if site is None:
        return None
    frame, name = site
    return {"file": frame.filename, "line": frame.lineno, "function": frame.function, "name": name}


def _access_json(record: AccessRecord, sites: Sites) -> dict[str, Any]:
    return {
        "stream": record.stream,
        "stream_name": stream_name(record.stream, sites),
        "stream_created": _created_json(record.stream, sites),
        "operator": record.operator,
        "argument": record.argument,
        "is_write": record.is_write,
        "stack": _stack_json(record.stack),
    }


def to_json(report: RuntimeErrorReport) -> dict[str, Any]:
    """The same data for machines; stacks are the user's frames, innermost last. `site`: where
    the report is placed (`placement`). Each stream comes with its name (`stream_name`) and,
    when seen, where it was made (`stream_created`). `reallocation` (a free-in-use's third
    site, null for other kinds) was added after the other keys."""
    allocation = report.allocation
    sites = dict(report.stream_sites)
    side, frame = placement(report)
    return {
        "kind": report.kind,
        "severity": report.severity,
        "message": message(report),
        "site": None
        if frame is None
        else {"access": side, "file": frame.filename, "line": frame.lineno, "function": frame.function},
        "allocation": None
        if allocation is None
        else {
            "ptr": allocation.ptr,
            "size": allocation.size,
            "stream": allocation.stream,
            "stream_name": stream_name(allocation.stream, sites),
            "stream_created": _created_json(allocation.stream, sites),
            "stack": _stack_json(allocation.stack),
        },
        "current": _access_json(report.current, sites),
        "previous": None if report.previous is None else _access_json(report.previous, sites),
        "reallocation": None if report.reallocation is None else _access_json(report.reallocation, sites),
    }
