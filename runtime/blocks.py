"""The blocks the engine tracks, by address: each allocation's byte range and the access state
of its intervals (cells.py), found from any pointer into it. Memory never seen allocated is
backfilled as a block of unknown stream, grown as later accesses reach further (CSAN does the
same). Torch-free; the tracker (tracker.py) owns one."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from csan_lint.runtime.cells import Cell, Epoch
from csan_lint.runtime.events import AllocationRecord
from csan_lint.runtime.stacks import EMPTY_STACK, Stack


class Allocation:
    """One block: its bytes [ptr, end), its stream (None: no stream owns it, or unknown), the
    streams `record_stream` named, and its intervals' access state."""

    __slots__ = ("backfilled", "bounds", "cells", "end", "ptr", "recorded", "stack", "stream")

    def __init__(
        self, ptr: int, end: int, stream: int | None, stack: Stack | None, backfilled: bool, write: Epoch | None
    ) -> None:
        self.ptr = ptr
        self.end = end
        self.stream = stream
        self.stack = stack
        # Interval k covers [bounds[k], bounds[k + 1]) (the last one up to `end`).
        self.bounds = [ptr]
        self.cells = [Cell(write)]
        self.recorded: set[int] | None = None
        self.backfilled = backfilled

    def record(self) -> AllocationRecord:
        return AllocationRecord(self.ptr, self.end - self.ptr, self.stream, self.stack or EMPTY_STACK)


class Blocks:
    """Allocations by base address, with the sorted bases to find the block holding a view.
    `by_base` and `bases` are the tracker's to read on its hot path; change them through here."""

    def __init__(self) -> None:
        self.by_base: dict[int, Allocation] = {}
        self.bases: list[int] = []

    def add(self, allocation: Allocation) -> None:
        """A new block; the caller forgot the blocks it overlaps first (`forget_overlapping`)."""
        self.by_base[allocation.ptr] = allocation
        insort(self.bases, allocation.ptr)

    def forget_overlapping(self, ptr: int, end: int) -> None:
        """Blocks overlapping [ptr, end) were freed without us seeing it: forget them."""
        bases = self.bases
        i = bisect_left(bases, end)
        while i > 0:
            old = self.by_base[bases[i - 1]]
            if old.end <= ptr:
                break
            self.remove(old)
            i -= 1

    def remove(self, allocation: Allocation) -> None:
        del self.by_base[allocation.ptr]
        bases = self.bases
        del bases[bisect_left(bases, allocation.ptr)]

    def find(self, ptr: int) -> Allocation | None:
        """The block holding ptr, if any."""
        allocation = self.by_base.get(ptr)
        if allocation is not None:
            return allocation
        i = bisect_right(self.bases, ptr) - 1
        if i >= 0:
            allocation = self.by_base[self.bases[i]]
            if ptr < allocation.end:
                return allocation
        return None

    def locate(self, ptr: int, size: int) -> Allocation:
        """The block holding [ptr, ptr + size); memory never seen allocated is backfilled (the
        module docstring)."""
        allocation = self.find(ptr)
        if allocation is None:
            i = bisect_right(self.bases, ptr)
            end = ptr + size
            if i < len(self.bases):
                end = min(end, self.bases[i])
            allocation = self.by_base[ptr] = Allocation(ptr, end, None, None, True, None)
            self.bases.insert(i, ptr)
        elif allocation.backfilled and ptr + size > allocation.end:
            i = bisect_right(self.bases, ptr)
            limit = self.bases[i] if i < len(self.bases) else ptr + size
            allocation.end = max(allocation.end, min(ptr + size, limit))
        return allocation

    def last_write(self, ptr: int) -> Epoch | None:
        """The last write to the byte at `ptr`; None where nothing was written or the block is unknown."""
        allocation = self.find(ptr)
        if allocation is None:
            return None
        return allocation.cells[bisect_right(allocation.bounds, ptr) - 1].write
