"""The interpreters' states as a reader sees them (`csan-lint reveal`, lint/shell/reveal.py):
streamflow's `FlowState` (lint/ordering.py) and hostflow's `HostState` (lint/hoststate.py), each
as JSON-able data in an order that does not depend on memory addresses. A module of its own
because ordering.py is at its size limit; one state, once merged, gets one `describe`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

from csan_lint.lint.hoststate import Block, Capture, HostState, Pending
from csan_lint.lint.ordering import LAUNCHES, FlowState, Mark, TrackedTensor
from csan_lint.lint.pathfacts import describe_fact

Where = Callable[[cst.CSTNode], tuple[int, int, str] | None]
"""A node's line, column and code; None for a node outside the module (one the analysis made)."""


def place(where: Where, node: cst.CSTNode | None) -> str:
    """`12:5 y` for a node of the module, `the return` for None, `elsewhere` outside it."""
    if node is None:
        return "the return"
    found = where(node)
    return "elsewhere" if found is None else "{}:{} {}".format(*found)


def describe_flow(state: FlowState, where: Where) -> dict[str, object]:
    """Streamflow's state: the current stream; per tracked value its last writes, reads since,
    uses on other streams (each with what it is ordered before); names bound to streams and
    stream contexts; what each stream's last launch, and the work made before the function was
    entered (the probes of lint/effects.py), are ordered before; the path facts; and tensors
    released with a use on another stream still to be judged where their stream allocates."""
    values, launches, before_entry = {}, {}, {}
    for key in sorted(state.tensors):
        tensor = state.tensors[key]
        if key.startswith(LAUNCHES):
            launches[key.removeprefix(LAUNCHES)] = _tokens(tensor.writes)
        elif key.startswith("\0"):  # no name in source spells it
            before_entry[key[1:]] = _tokens(tensor.writes)
        else:
            values[key] = _tensor(tensor, where)
    released = sorted(state.released.items(), key=lambda item: (item[0][0], _order(where, item[0][1])))
    return {
        "current_stream": state.current,
        "values": values,
        "streams": dict(sorted(state.streams.items())),
        "stream_contexts": dict(sorted(state.contexts.items())),
        "last_launch_ordered_before": launches,
        "work_before_entry_ordered_before": before_entry,
        "path_facts": sorted(map(describe_fact, state.facts)),
        "released_pending": [
            {"name": name, "released_at": place(where, node), **_tensor(tensor, where)}
            for (name, node), tensor in released
        ],
    }


def _tokens(marks: frozenset[Mark]) -> list[str]:
    return sorted({token for mark in marks for token in mark.after})


def _order(where: Where, node: cst.CSTNode | None) -> tuple[int, int, str]:
    found = where(node) if node is not None else None
    return found or (0, 0, "")


def _tensor(tensor: TrackedTensor, where: Where) -> dict[str, object]:
    """Its kind as far as the state knows it: accesses on streams, no device (a value made in
    host memory is kept with none, until a copy writes it)."""
    accessed = tensor.writes or tensor.reads or tensor.uses
    kind = "tensor where used as one (a call's result)" if tensor.unsure else "tensor"
    return {
        "kind": kind if accessed else f"{kind}, no device work (host memory, or made elsewhere)",
        "allocated_on": tensor.alloc,
        "pool": tensor.pool,
        "last_writes": _marks(tensor.writes, where, writes=True),
        "reads_since": _marks(tensor.reads, where),
        "uses_on_other_streams": _marks(tensor.uses, where),
        "recorded_on": sorted(tensor.recorded),
        "escaped": tensor.escaped,
        "a_tensor_assuming": sorted(tensor.assumed),
    }


def _marks(marks: frozenset[Mark], where: Where, *, writes: bool = False) -> list[dict[str, object]]:
    """Each access: how it made the value (a write: `written`, `allocated`, `by the caller`,
    `moved`), its stream, where, in which function, and the ordering facts kept on it."""

    def order(mark: Mark) -> tuple[object, ...]:
        return _order(where, mark.access.node), mark.access.stream, mark.access.produced, sorted(mark.after)

    return [
        {
            "how": mark.access.produced if writes else "read",
            "stream": mark.access.stream,
            "at": place(where, mark.access.node),
            "in": mark.access.function or "<module>",
            "ordered_before": sorted(mark.after),
            "ordered_before_where": sorted(
                f"{token} where {' and '.join(sorted(map(describe_fact, condition)))}"
                for token, condition in mark.held_if
            ),
            "made_where": sorted(map(describe_fact, mark.facts)),
        }
        for mark in sorted(marks, key=order)
    ]


def describe_host(state: HostState, where: Where) -> dict[str, object]:
    """Hostflow's state: the current stream; per host buffer the non-blocking copies that may
    still write it (downloads) or read it (uploads), or whose direction the code does not say,
    each with the tokens whose host sync
    covers it; pinned buffers; events made and not yet recorded on every path; names bound to
    streams and stream contexts; the graph capture running."""
    return {
        "current_stream": state.current,
        "pending_downloads": _pending(state.into, where),
        "pending_uploads": _pending(state.out_of, where),
        "pending_copies_of_unknown_direction": _pending(state.unplaced, where),
        "pinned": sorted(state.pinned),
        "events_not_recorded": sorted(state.unrecorded),
        "streams": dict(sorted(state.streams.items())),
        "stream_contexts": dict(sorted(state.contexts.items())),
        "capture": _capture(state.capture, where) if state.capture is not None else None,
    }


def _pending(pending: Mapping[str, frozenset[Pending]], where: Where) -> dict[str, list[dict[str, object]]]:
    def order(copy: Pending) -> tuple[object, ...]:
        return _order(where, copy.copy.node), copy.copy.stream, sorted(copy.after)

    return {
        buffer: [
            {"copy": place(where, p.copy.node), "stream": p.copy.stream, "synced_by": sorted(p.after)}
            for p in sorted(pending[buffer], key=order)
        ]
        for buffer in sorted(pending)
    }


def _capture(capture: Capture, where: Where) -> dict[str, object]:
    def blocks(found: frozenset[Block]) -> list[str]:
        return sorted(f"{place(where, block.item)} on {block.stream}" for block in found)

    return {
        "stream": capture.stream,
        "forked": sorted(capture.forked),
        "side_blocks": blocks(capture.blocks),
        "joined": blocks(capture.joined),
        "events": sorted(f"{event} on {stream}" for event, stream in capture.events),
    }
