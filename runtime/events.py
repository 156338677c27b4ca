"""The engine's vocabulary: what a kernel touches and what an error report holds. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from csan_lint.runtime import kinds
from csan_lint.runtime.extents import Layout
from csan_lint.runtime.stacks import Stack

HOST = -1
"""The host's "stream" id: the CPU has its own clock (pinned-memory reads and writes)."""
DEFAULT_STREAM = 0
"""The legacy default stream's handle."""

WARNING_KINDS = frozenset({kinds.WAIT_UNRECORDED_EVENT})
"""Kinds that are suspicious but not a race by themselves (the wait orders nothing)."""


class Access(NamedTuple):
    """The bytes one kernel argument touches: the extent [ptr, ptr + size) from its lowest to its
    highest byte, all of them unless `layout` (element size, sizes, strides) says which (a strided
    view; see extents.py). `argument` is the schema name(s) aliasing the tensor, e.g. "self" or
    "self, other"."""

    ptr: int
    size: int
    is_write: bool
    argument: str
    is_output: bool = False
    layout: Layout | None = None


class AccessRecord(NamedTuple):
    """One side of a report: who touched the memory (a kernel, the host, a free, a capture call)."""

    stream: int
    operator: str
    argument: str
    is_write: bool
    stack: Stack


class AllocationRecord(NamedTuple):
    """The block involved: base pointer, size in bytes, allocating stream (None: unknown, the
    allocation was never seen and was backfilled), allocation stack."""

    ptr: int
    size: int
    stream: int | None
    stack: Stack


@dataclass(frozen=True)
class RuntimeErrorReport:
    """One detected error. `previous` is None for errors with a single site (capture on the
    default stream, a wait on an unrecorded event); `allocation` is None when no memory is
    involved (capture and event errors). A free-in-use has three sites: `current` is the free,
    `previous` the other stream's use, `reallocation` the allocation the freed block may have
    been handed out to before that use was done (None for every other kind)."""

    kind: str
    current: AccessRecord
    previous: AccessRecord | None
    allocation: AllocationRecord | None
    stream_sites: tuple[tuple[int, Stack], ...] = ()
    """(stream, the stack that created it) for the streams the report names whose creation was
    seen: reports name a stream by where it was made, not by its handle."""
    reallocation: AccessRecord | None = None

    @property
    def severity(self) -> str:
        """ "warning" for kinds that order nothing but race nothing by themselves, else "error"."""
        return "warning" if self.kind in WARNING_KINDS else "error"
