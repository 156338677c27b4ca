"""Freed blocks the caching allocator may hand out again while another stream may still use
them, found by address and by owning stream. Torch-free; the tracker keeps one `FreedBlocks`.

A block freed with no `record_stream` goes back to its stream's pool at once, but the free
alone races nothing: the hazard is the block's next allocation (DESIGN.md, "Caching
allocator"). So a free whose block another stream's work may still use (not ordered before
the owner, not recorded) leaves a `FreedBlock`, checked when an allocation could be served by
it: one that overlaps its bytes (a real GPU's addresses, or an allocator model's), or any
later allocation on its stream that its pool could hand it to (the allocator picks among its
cached blocks by size, so which address such an allocation gets is the cache's state, not the
program's). The owner's first allocation after it is ordered after every such use retires it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import NamedTuple

from csan_lint.runtime.cells import Epoch
from csan_lint.runtime.events import AllocationRecord

POOL_CAP = 64
"""Freed blocks kept per stream; past it the oldest is forgotten (bounded state, a missed report
at worst)."""


class FreedBlock(NamedTuple):
    """A freed block (its allocation's record), its free (an epoch on the owning stream) and
    the other streams' uses the owner was not ordered after at the free."""

    allocation: AllocationRecord
    free: Epoch
    uses: list[Epoch]


class FreedBlocks:
    """The freed blocks still awaiting their reuse check, by base address (sorted, to find the
    ones an allocation overlaps) and by owning stream (in free order)."""

    def __init__(self) -> None:
        self._by_ptr: dict[int, FreedBlock] = {}
        self._bases: list[int] = []
        self._by_stream: dict[int, dict[int, FreedBlock]] = {}

    def __len__(self) -> int:
        return len(self._by_ptr)

    def add(self, block: FreedBlock) -> None:
        ptr, stream = block.allocation.ptr, block.allocation.stream
        assert stream is not None  # only a stream's block goes back to a stream's pool
        self.take_overlapping(ptr, ptr + block.allocation.size)  # reused since, unseen: stale
        self._by_ptr[ptr] = block
        insort(self._bases, ptr)
        pool = self._by_stream.setdefault(stream, {})
        pool[ptr] = block
        if len(pool) > POOL_CAP:
            self.remove(next(iter(pool.values())))

    def take_overlapping(self, ptr: int, end: int) -> list[FreedBlock]:
        """Remove and return the blocks that share a byte with [ptr, end)."""
        bases = self._bases
        i = bisect_left(bases, end)
        found = []
        while i > 0:
            block = self._by_ptr[bases[i - 1]]
            if block.allocation.ptr + block.allocation.size <= ptr:
                break
            found.append(block)
            i -= 1
        for block in found:
            self.remove(block)
        return found

    def of_stream(self, stream: int) -> list[FreedBlock]:
        """The blocks `stream`'s pool holds, oldest first (a copy: the caller removes some)."""
        pool = self._by_stream.get(stream)
        return list(pool.values()) if pool else []

    def remove(self, block: FreedBlock) -> None:
        ptr, stream = block.allocation.ptr, block.allocation.stream
        del self._by_ptr[ptr]
        del self._bases[bisect_left(self._bases, ptr)]
        assert stream is not None
        pool = self._by_stream[stream]
        del pool[ptr]
        if not pool:
            del self._by_stream[stream]
