"""The race check of one kernel access against what a tensor's last accesses left pending.

Pure: given the tensor's marks and the new access, which earlier accesses it is not ordered
after (`conflicts`), and the tensor's marks once the access is recorded (`with_access`).
The interpreter (lint/accesses.py) decides what to do with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import libcst as cst

from csan_lint.lint.analysis.tokens import distinct
from csan_lint.lint.ordering import Access, HazardKind, Mark, Produced, TrackedTensor, in_report_order
from csan_lint.lint.regions import disjoint


@dataclass(frozen=True)
class Conflict:
    """An earlier access the new one is not ordered after."""

    kind: HazardKind
    access: Access
    """The new access, on the stream that races (a stream chosen at run time: its racing choice)."""
    other: str
    """The stream of the earlier access."""
    origin: str | None
    """The function that made the earlier access."""
    produced: Produced
    """How the earlier write came about (a read's conflict: "written")."""
    node: cst.CSTNode
    """The earlier access's node."""


def conflicts(tensor: TrackedTensor, access: Access, elsewhere: Callable[[Mark], bool]) -> Iterator[Conflict]:
    """Each last write (and, for a write, each last read) of a part `access` may overlap, not
    ordered before its stream, in report order; `elsewhere`: marks made only on other paths."""
    stream, region = access.stream, access.region
    for last in in_report_order(tensor.writes):
        if disjoint(last.access.region, region) or elsewhere(last):
            continue
        if (path := last.unordered(stream, distinct)) is not None:
            kind = HazardKind.WRITE_AFTER_WRITE if access.write else HazardKind.READ_AFTER_WRITE
            other, on = path
            earlier = last.access
            yield Conflict(kind, replace(access, stream=on), other, earlier.function, earlier.produced, earlier.node)
    if not access.write:
        return
    for read in in_report_order(tensor.reads):
        if disjoint(read.access.region, region) or elsewhere(read):
            continue
        if (path := read.unordered(stream, distinct)) is not None:
            other, on = path
            earlier = read.access
            yield Conflict(
                HazardKind.WRITE_AFTER_READ,
                replace(access, stream=on),
                other,
                earlier.function,
                "written",
                earlier.node,
            )


def with_access(tensor: TrackedTensor, mark: Mark) -> TrackedTensor:
    """The tensor once `mark`'s access is recorded: a write replaces the marks of the parts it
    may overlap (what parts it cannot overlap last had stays theirs), a read replaces the last
    read on its stream; a use off the allocating stream joins its uses."""
    access = mark.access
    if access.write and access.region is None:
        tensor = replace(tensor, writes=frozenset({mark}), reads=frozenset())
    elif access.write:
        other_parts = frozenset(m for m in tensor.writes if disjoint(m.access.region, access.region))
        their_reads = frozenset(m for m in tensor.reads if disjoint(m.access.region, access.region))
        tensor = replace(tensor, writes=other_parts | {mark}, reads=their_reads)
    else:
        tensor = replace(tensor, reads=frozenset(r for r in tensor.reads if r.access.stream != access.stream) | {mark})
    if tensor.alloc is not None and access.stream != tensor.alloc:
        tensor = replace(tensor, uses=frozenset(u for u in tensor.uses if u.access != access) | {mark})
    return tensor
