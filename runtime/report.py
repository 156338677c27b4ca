"""Runtime error reports as text (in the spirit of CSAN's) and JSON. Stacks are resolved here,
only when a report is shown; the user's frames are shown, torch's and our own are hidden."""

from __future__ import annotations

import linecache
from typing import Any

from csan_lint.runtime import kinds
from csan_lint.runtime.events import (
    DEFAULT_STREAM,
    HOST,
    AccessRecord,
    RuntimeErrorReport,
)
from csan_lint.runtime.stacks import Frame, Stack, resolve, user_frames
from csan_lint.runtime.tracker import (
    ALLOCATION_OPERATOR,
    CAPTURE_BEGIN_OPERATOR,
    CAPTURE_END_OPERATOR,
    FREE_OPERATOR,
    REALLOCATION_OPERATOR,
)


def stream_name(stream: int | None) -> str:
    if stream is None:
        return "an unknown stream"
    if stream == HOST:
        return "the host"
    if stream == DEFAULT_STREAM:
        return "the default stream"
    return f"stream {stream}"


def _short(operator: str) -> str:
    """An operator schema cut to its name: `aten::mul.Tensor(Tensor self, ...)` -> `aten::mul.Tensor`."""
    return operator.split("(", 1)[0].strip() or "?"


def _at(record: AccessRecord) -> str:
    """The innermost user frame when known: " (model.py:44)", else ""."""
    frames = _shown_frames(record.stack)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _site(record: AccessRecord) -> str:
    """`op` on stream, with the innermost user frame when known: "`aten::mul` on stream 7 (model.py:44)"."""
    return f"`{_short(record.operator)}` on {_where(record)}"


def _where(record: AccessRecord) -> str:
    """The stream, with the innermost user frame when known: "stream 7 (model.py:44)"."""
    return f"{stream_name(record.stream)}{_at(record)}"


def message(report: RuntimeErrorReport) -> str:
    """One line that says what happened."""
    cur, prev = report.current, report.previous
    kind = report.kind
    if kind == kinds.CAPTURE_ON_DEFAULT_STREAM:
        return "CUDA graph capture begun on the default stream (capture needs a side stream)"
    if kind == kinds.WAIT_UNRECORDED_EVENT:
        return f"{stream_name(cur.stream)} waits on an event that was never recorded: the wait orders nothing"
    assert prev is not None, kind
    if kind == kinds.UNJOINED_CAPTURE_FORK:
        if cur.operator == CAPTURE_END_OPERATOR and prev.operator == CAPTURE_BEGIN_OPERATOR:
            return f"CUDA graph capture begun on {stream_name(prev.stream)} ended on {stream_name(cur.stream)}"
        if cur.operator == CAPTURE_END_OPERATOR:
            return (
                f"{_site(prev)} during CUDA graph capture is not joined back to the capture stream "
                f"({stream_name(cur.stream)}) before the capture ends"
            )
        return (
            f"{_site(cur)} during CUDA graph capture on {stream_name(prev.stream)} "
            "is not forked from the capture stream"
        )
    if kind == kinds.FREE_IN_USE:
        again = report.reallocation
        reused = f" and handed out again to an allocation on {_where(again)}" if again is not None else ""
        return (
            f"a block allocated on {stream_name(cur.stream)} is freed{_at(cur)}{reused} while {_site(prev)} "
            "may still use it (no record_stream, no ordering before the reuse)"
        )
    if prev.operator == ALLOCATION_OPERATOR:
        return (
            f"{_site(cur)} uses a block allocated on {stream_name(prev.stream)} without being ordered after "
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
    return f"{_site(cur)} {verb} memory that {_site(prev)} may still be {pending}"


def _shown_frames(stack: Stack) -> list[Frame]:
    """The user's frames; all frames when none is the user's (better than nothing)."""
    frames = resolve(stack)
    return user_frames(frames) or frames


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


def _describe(record: AccessRecord, is_memory: bool, label: str) -> str:
    operator = _short(record.operator)
    if record.operator == FREE_OPERATOR:
        return f"Freed for reuse on {stream_name(record.stream)}"
    if record.operator == REALLOCATION_OPERATOR:
        return f"{label}: allocated again on {stream_name(record.stream)}"
    if record.operator == ALLOCATION_OPERATOR:
        return f"{label}: allocated on {stream_name(record.stream)}, reusing a block its earlier work may still use"
    if not is_memory:
        return f"{label}: `{operator}` on {stream_name(record.stream)}"
    action = "writing" if record.is_write else "reading"
    argument = f" argument `{record.argument}` of" if record.argument else " in"
    return f"{label}: {stream_name(record.stream)}, {action}{argument} `{operator}`"


def render_text(report: RuntimeErrorReport) -> str:
    """A multi-line report: what happened, both accesses with their stacks, the allocation."""
    is_memory = report.allocation is not None
    lines = [f"csan: {report.kind}: {message(report)}"]
    lines.append(f"  {_describe(report.current, is_memory, 'Access' if is_memory else 'At')}, from:")
    lines += _format_stack(report.current.stack)
    if report.previous is not None:
        lines.append(
            f"  {_describe(report.previous, is_memory, 'Previous access' if is_memory else 'Previously')}, from:"
        )
        lines += _format_stack(report.previous.stack)
    if report.reallocation is not None:
        lines.append(f"  {_describe(report.reallocation, is_memory, 'Reallocation')}, from:")
        lines += _format_stack(report.reallocation.stack)
    allocation = report.allocation
    if allocation is not None:
        lines.append(
            f"  Memory: {allocation.size} bytes at {allocation.ptr:#x},"
            f" allocated on {stream_name(allocation.stream)}, from:"
            if allocation.stack
            else f"  Memory: {allocation.size} bytes at {allocation.ptr:#x} (its allocation was not seen)"
        )
        if allocation.stack:
            lines += _format_stack(allocation.stack)
    return "\n".join(lines)


def _stack_json(stack: Stack) -> list[dict[str, Any]]:
    return [{"file": f.filename, "line": f.lineno, "function": f.function} for f in _shown_frames(stack)]


def _access_json(record: AccessRecord) -> dict[str, Any]:
    return {
        "stream": record.stream,
        "operator": record.operator,
        "argument": record.argument,
        "is_write": record.is_write,
        "stack": _stack_json(record.stack),
    }


def to_json(report: RuntimeErrorReport) -> dict[str, Any]:
    """The same data for machines; stacks are the user's frames, innermost last. `reallocation`
    (a free-in-use's third site, null for other kinds) was added after the other keys."""
    allocation = report.allocation
    return {
        "kind": report.kind,
        "severity": report.severity,
        "message": message(report),
        "allocation": None
        if allocation is None
        else {
            "ptr": allocation.ptr,
            "size": allocation.size,
            "stream": allocation.stream,
            "stack": _stack_json(allocation.stack),
        },
        "current": _access_json(report.current),
        "previous": None if report.previous is None else _access_json(report.previous),
        "reallocation": None if report.reallocation is None else _access_json(report.reallocation),
    }
