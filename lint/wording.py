"""How the rules say a fact, where several rules say it alike: the message fields of a stream
hazard (`message_fields`) and of a host hazard (`host_fields`)."""

from __future__ import annotations

import libcst as cst

from csan_lint.lint.analysis.tokens import CURRENT, DEFAULT, alternatives, choice, spelled
from csan_lint.lint.facts import HostHazard, ModuleFlow
from csan_lint.lint.hoststate import CAPTURE, Copy
from csan_lint.lint.names import CURRENT_STREAM, DEFAULT_STREAM
from csan_lint.lint.ordering import Hazard


def message_fields(hazard: Hazard, current: str = f"{CURRENT_STREAM}()") -> dict[str, str]:
    """What rule templates may name: `{tensor}`; `{stream}` (the offending access's) and `{other}`
    as prose ("side stream 's'"), `{waiter}` the offending stream in short, `{stream_code}` and
    `{other_code}` as code for fixes, with the current stream spelled `current` (as the module's
    fixes spell it); `{verb}`; `{produced}`, what the conflicting access did ("written", or
    "allocated": its memory may still be in use by work launched there before); `{block}`, where
    the offending work starts (its stream `with` block, or its statement)."""
    verb = "written" if hazard.access.write else "read"
    if hazard.returned:  # the caller's next use, after the function returns
        return {
            "tensor": hazard.tensor,
            "stream": f"the caller's stream after '{hazard.function}' returns",
            "waiter": "the caller's stream",
            "other": _describe(hazard.other),
            "stream_code": current,
            "other_code": _code(hazard.other, current),
            "verb": "used",
            "produced": _PRODUCED["moved"] if hazard.produced == "moved" else "written",
        }
    return {
        "tensor": hazard.tensor,
        "stream": _describe(hazard.access.stream),
        "waiter": _describe(hazard.access.stream),
        "other": _describe(hazard.other) + (f" in {hazard.origin}()" if hazard.origin else ""),
        "stream_code": _code(hazard.access.stream, current),
        "other_code": _code(hazard.other, current),
        "verb": "first used" if hazard.produced == "allocated" else verb,  # a read or a write races alike
        "produced": _PRODUCED.get(hazard.produced, hazard.produced),
        "block": "the `with` block" if isinstance(hazard.access.span_node, cst.With) else "this statement",
    }


_PRODUCED = {"by the caller": "written by the caller", "moved": "moved in place (its parameters copied)"}
"""How a message says what the conflicting write did, where its word alone does not."""


def _describe(stream: str) -> str:
    """Prose for a stream token; of a stream chosen at run time, only the side streams it may be."""
    if stream == DEFAULT:
        return "the default stream"
    sides = choice(spelled(part) for part in alternatives(stream) if part != CURRENT)
    return f"side stream '{sides}'" if sides else "the current stream"


def _code(stream: str, current: str) -> str:
    """Source for a stream token, the current stream spelled `current`; of a stream chosen at run
    time, its first side stream (waiting on it orders each path: on the others it is a stream
    the current one need not wait for, or the current stream itself)."""
    known = {CURRENT: current, DEFAULT: f"{DEFAULT_STREAM}()"}
    sides = [part for part in alternatives(stream) if part != CURRENT]
    return known.get(sides[0], spelled(sides[0])) if sides else current


def first_copy(flow: ModuleFlow, hazard: HostHazard) -> Copy | None:
    """The pending copy a message names: the first in the source, the same on every run."""

    def start(copy: Copy) -> tuple[int, int, str]:
        position = flow.range(copy.node).start
        return position.line, position.column, copy.stream

    return min(hazard.copies, key=start, default=None)


def host_fields(flow: ModuleFlow, hazard: HostHazard) -> dict[str, str]:
    """Message fields of a host hazard: its own, plus `{stream}`/`{stream_code}`, and the first
    pending copy's `{copy_line}` and stream."""
    result = dict(hazard.fields)
    first = first_copy(flow, hazard)
    if first is not None:
        result["copy_line"] = str(flow.line(first.node))
        result["stream"] = first.stream
    for name in ("stream", "capture"):
        if name in result:
            result[f"{name}_code"] = _host_code(result[name])
            result[name] = _host_describe(result[name])
    return result


def _host_describe(stream: str) -> str:
    if stream == CURRENT:
        return "the current stream"
    if stream == CAPTURE:
        return "the capture stream"
    if stream == DEFAULT:
        return "the default stream"
    return f"stream '{stream}'"


def _host_code(stream: str) -> str:
    if stream in (CURRENT, CAPTURE):
        return "torch.cuda.current_stream()"
    if stream == DEFAULT:
        return f"{DEFAULT_STREAM}()"
    return stream
