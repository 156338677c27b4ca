"""The emulated device's caching allocator: CUDA's native allocator's algorithm over host memory,
so device tensors get the addresses, reuse and statistics a GPU run gives them.

Segments are host allocations (`torch.empty` bytes, lazily committed by the OS) of the sizes
CUDA's allocator asks the driver for: 2 MiB for requests up to 1 MiB (the small pool), 20 MiB
for requests under 10 MiB, else the request rounded up to 2 MiB (the large pool). A request is
rounded up to a multiple of 512 bytes and served, best fit, from a free block of the same pool
*and stream* (c10's `BlockPool` is ordered by stream, then size); a larger block is split
(small pool: a remainder of 512 bytes or more; large: over 1 MiB) and a freed block merges with
its free neighbours. A block used on other streams (`record_stream`) goes back to its pool only
once those streams' work at the free is done: CUDA records an event on each and polls it; here
"done" is what the host knows done (a sync, or a query that answered True), the moment a
program could rely on it. When a segment would pass the device memory size, the allocator
waits for those events and releases its free segments, then retries (`num_alloc_retries`);
then raises `torch.OutOfMemoryError` with CUDA's message. `empty_cache` releases free segments.

Memory statistics follow `torch.cuda.memory_stats`'s keys (`allocated_bytes.all.current`, ...).
"""

from __future__ import annotations

import bisect
import os
import re
import threading
from collections.abc import Callable
from typing import cast

import torch

from csan_lint.runtime.cuda_semantics import MIN_BLOCK_SIZE, SMALL_SIZE, allocation_size, round_size

DEFAULT_MEMORY = 80 * 2**30
MEMORY_VARIABLE = "CSAN_LINT_DEVICE_MEMORY"
_POOLS = ("small_pool", "large_pool")
_HOST = torch.device("cpu")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """`"16GiB"`, `"16G"`, `"512MiB"`, `"1073741824"`: bytes; anything else raises ValueError."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if match is None:
        raise ValueError(f"not a memory size: {text!r} (examples: 16GiB, 512MiB, 1073741824)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError(f"not a memory size: {text!r} (it must be positive)")
    return size


def memory_size_from_environment() -> int:
    """The emulated device's memory: `CSAN_LINT_DEVICE_MEMORY`, else 80 GiB."""
    text = os.environ.get(MEMORY_VARIABLE)
    if not text:
        return DEFAULT_MEMORY
    try:
        return parse_size(text)
    except ValueError as error:
        raise ValueError(f"{MEMORY_VARIABLE}: {error}") from None


def format_size(size: int) -> str:
    """As c10's `format_size` in its out-of-memory message."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576:.2f} MiB"
    return f"{size / 1073741824:.2f} GiB"


class Segment:
    """A host allocation standing for one device segment."""

    __slots__ = ("memory", "ptr", "size", "small")

    def __init__(self, size: int, small: bool) -> None:
        self.memory = torch.empty(size, dtype=torch.uint8).untyped_storage()
        self.ptr = self.memory.data_ptr()
        self.size = size
        self.small = small


class Block:
    """A piece of a segment, free or handed out; neighbours in address order."""

    __slots__ = ("segment", "ptr", "size", "requested", "stream", "allocated", "prev", "next", "uses", "events")

    def __init__(self, segment: Segment, ptr: int, size: int, stream: int) -> None:
        self.segment = segment
        self.ptr = ptr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.uses: set[int] = set()  # other streams it was record_stream'ed on
        self.events: list[tuple[int, int]] = []  # (stream, its launch count) at the free

    def sort_key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.ptr)


class Statistics:
    """CUDA's `DeviceStats`: per statistic, "all" and the two pools, each with its current,
    peak, allocated (sum of increases) and freed (sum of decreases) value. Flat lists indexed
    by `statistic * 3 + pool` (0 all, 1 small, 2 large): updated on every allocation and free."""

    NAMES = (
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    )
    # Index of each statistic's "all" entry (its pools follow).
    ALLOCATION, SEGMENT, ACTIVE, INACTIVE_SPLIT, ALLOCATED_BYTES = 0, 3, 6, 9, 12
    RESERVED_BYTES, ACTIVE_BYTES, INACTIVE_SPLIT_BYTES, REQUESTED_BYTES = 15, 18, 21, 24

    def __init__(self) -> None:
        size = 3 * len(self.NAMES)
        self.current = [0] * size
        self.peak = [0] * size
        self.allocated = [0] * size
        self.freed = [0] * size
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    def add(self, small: bool, *changes: tuple[int, int]) -> None:
        """Each (statistic index, amount), for "all" and the block's pool."""
        pool = 1 if small else 2
        current, peak, allocated, freed = self.current, self.peak, self.allocated, self.freed
        for statistic, amount in changes:
            for index in (statistic, statistic + pool):
                value = current[index] = current[index] + amount
                if value > peak[index]:
                    peak[index] = value
                if amount > 0:
                    allocated[index] += amount
                else:
                    freed[index] -= amount

    def set_current(self, statistic: int, pool: int, value: int) -> None:
        """Set a pool's value (and "all" by the same change)."""
        amount = value - self.current[statistic + pool]
        if amount:
            self.add(pool == 1, (statistic, amount))

    def reset_peaks(self) -> None:
        self.peak = list(self.current)

    def reset_accumulated(self) -> None:
        self.allocated = [0] * len(self.current)
        self.freed = [0] * len(self.current)
        self.num_alloc_retries = self.num_ooms = 0
        self.num_device_alloc = self.num_device_free = 0

    def as_dict(self) -> dict[str, int]:
        """`torch.cuda.memory_stats()`'s flat keys, sorted as torch sorts them."""
        out: dict[str, int] = {}
        for position, name in enumerate(self.NAMES):
            for pool, pool_name in enumerate(("all", *_POOLS)):
                index = 3 * position + pool
                out[f"{name}.{pool_name}.current"] = self.current[index]
                out[f"{name}.{pool_name}.peak"] = self.peak[index]
                out[f"{name}.{pool_name}.allocated"] = self.allocated[index]
                out[f"{name}.{pool_name}.freed"] = self.freed[index]
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["num_sync_all_streams"] = 0
        out["max_split_size"] = -1
        for name in ("oversize_allocations", "oversize_segments"):
            for metric in ("current", "peak", "allocated", "freed"):
                out[f"{name}.{metric}"] = 0
        return dict(sorted(out.items()))


class CachingAllocator:
    """One device's caching allocator. `pending(stream, upto)` answers whether the host cannot
    know that stream's work up to a launch count is done; `launches(stream)` is that count now.
    A block's pool is its stream's, or during a CUDA graph capture the graph's private pool
    (a negative key: never handed to a stream's request)."""

    def __init__(
        self, capacity: int, pending: Callable[[int, int], bool], launches: Callable[[int], int], device: int = 0
    ) -> None:
        self.capacity = capacity
        self.device = device
        self._pending = pending
        self._launches = launches
        self.pools: tuple[list[Block], list[Block]] = ([], [])  # small, large: free blocks by sort_key
        self.segments: list[Segment] = []
        self.waiting: list[Block] = []  # freed blocks waiting for their recorded streams
        self.stats = Statistics()
        self.lock = threading.RLock()
        self._busy = False
        self._deferred: list[Block] = []
        # CUDA graphs' private pools (negative keys in place of a stream): how many graphs use
        # each; their free segments stay reserved until no graph does.
        self.pool_users: dict[int, int] = {}

    # -- allocation ----------------------------------------------------------------------

    def malloc(self, nbytes: int, stream: int) -> Block:
        with self.lock:
            # A free may arrive in the middle (a garbage collection run by an allocation here
            # frees a tensor): it waits until the pools are consistent again.
            self._busy = True
            try:
                block = self._malloc(nbytes, stream)
            finally:
                self._busy = False
                deferred, self._deferred = self._deferred, []
                for freed in deferred:
                    self.free(freed)
            return block

    def _malloc(self, nbytes: int, stream: int) -> Block:
        self._process_events()
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(small, size, stream)
        if block is None:
            block = self._new_segment(small, size, stream)
        block.allocated = True
        block = self._split(block, size)
        block.requested = nbytes
        stats = self.stats
        stats.add(
            small,
            (stats.ALLOCATION, 1),
            (stats.ALLOCATED_BYTES, block.size),
            (stats.ACTIVE, 1),
            (stats.ACTIVE_BYTES, block.size),
            (stats.REQUESTED_BYTES, nbytes),
        )
        return block

    def _best_fit(self, small: bool, size: int, stream: int) -> Block | None:
        pool = self.pools[0 if small else 1]
        index = bisect.bisect_left(pool, (stream, size, 0), key=Block.sort_key)
        if index < len(pool) and pool[index].stream == stream:
            return pool.pop(index)
        return None

    def _new_segment(self, small: bool, size: int, stream: int) -> Block:
        segment_size = allocation_size(size)
        if self.reserved() + segment_size > self.capacity:
            # c10: free cached blocks (after waiting for the events that keep blocks), retry.
            self.stats.num_alloc_retries += 1
            self._release_cached()
            block = self._best_fit(small, size, stream)
            if block is not None:
                return block
            if self.reserved() + segment_size > self.capacity:
                self.stats.num_ooms += 1
                raise torch.OutOfMemoryError(self.out_of_memory_message(size))
        try:
            segment = Segment(segment_size, small)
        except RuntimeError:  # the host has no memory left for it
            self.stats.num_ooms += 1
            raise torch.OutOfMemoryError(self.out_of_memory_message(size)) from None
        self.segments.append(segment)
        self.stats.add(small, (Statistics.SEGMENT, 1), (Statistics.RESERVED_BYTES, segment_size))
        self.stats.num_device_alloc += 1
        return Block(segment, segment.ptr, segment_size, stream)

    def _split(self, block: Block, size: int) -> Block:
        remaining = block.size - size
        if remaining >= MIN_BLOCK_SIZE if block.segment.small else remaining > SMALL_SIZE:
            rest = Block(block.segment, block.ptr + size, remaining, block.stream)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert_free(rest)
        return block

    def _insert_free(self, block: Block) -> None:
        bisect.insort(self.pools[0 if block.segment.small else 1], block, key=Block.sort_key)

    def _remove_free(self, block: Block) -> None:
        pool = self.pools[0 if block.segment.small else 1]
        index = bisect.bisect_left(pool, block.sort_key(), key=Block.sort_key)
        del pool[index]

    # -- free ----------------------------------------------------------------------------

    def use_pool(self, pool: int, users: int) -> None:
        """A graph starts (1) or stops (-1) using private pool `pool` (a negative key)."""
        with self.lock:
            self.pool_users[pool] = self.pool_users.get(pool, 0) + users
            if self.pool_users[pool] <= 0:
                del self.pool_users[pool]

    def record_stream(self, block: Block, stream: int) -> None:
        with self.lock:  # as c10's recordStream: a free in another thread swaps `uses`
            if stream != block.stream:
                block.uses.add(stream)

    def free(self, block: Block) -> None:
        with self.lock:
            if self._busy:
                self._deferred.append(block)
                return
            small = block.segment.small
            self.stats.add(
                small,
                (Statistics.ALLOCATION, -1),
                (Statistics.ALLOCATED_BYTES, -block.size),
                (Statistics.REQUESTED_BYTES, -block.requested),
            )
            block.allocated = False
            if block.uses:
                block.events = [(stream, self._launches(stream)) for stream in sorted(block.uses)]
                block.uses = set()
                self.waiting.append(block)
                return
            self._free_block(block)

    def _free_block(self, block: Block) -> None:
        small = block.segment.small
        self.stats.add(small, (Statistics.ACTIVE, -1), (Statistics.ACTIVE_BYTES, -block.size))
        for neighbour in (block.prev, block.next):
            # Free and not waiting for events: in its pool.
            if neighbour is not None and not neighbour.allocated and not neighbour.events:
                self._merge(block, neighbour)
        self._insert_free(block)

    def _merge(self, block: Block, neighbour: Block) -> None:
        self._remove_free(neighbour)
        if neighbour is block.prev:
            block.ptr = neighbour.ptr
            block.prev = neighbour.prev
            if block.prev is not None:
                block.prev.next = block
        else:
            block.next = neighbour.next
            if block.next is not None:
                block.next.prev = block
        block.size += neighbour.size

    def _process_events(self) -> None:
        if not self.waiting:
            return
        still = []
        for block in self.waiting:
            if any(self._pending(stream, upto) for stream, upto in block.events):
                still.append(block)
            else:
                block.events = []
                self._free_block(block)
        self.waiting = still

    # -- release -------------------------------------------------------------------------

    def _release_cached(self) -> None:
        """c10's `release_cached_blocks`: wait for every event, then give back free segments."""
        for block in self.waiting:
            block.events = []
            self._free_block(block)
        self.waiting = []
        for pool in self.pools:
            for block in list(pool):
                if self.pool_users.get(block.stream, 0) > 0:
                    continue  # a live graph's private pool keeps its segments
                if block.prev is None and block.next is None:  # a whole segment, free
                    pool.remove(block)
                    self.segments.remove(block.segment)
                    self.stats.add(
                        block.segment.small, (Statistics.SEGMENT, -1), (Statistics.RESERVED_BYTES, -block.segment.size)
                    )
                    self.stats.num_device_free += 1

    def empty_cache(self) -> None:
        with self.lock:
            self._release_cached()

    # -- queries -------------------------------------------------------------------------

    def reserved(self) -> int:
        return self.stats.current[Statistics.RESERVED_BYTES]

    def allocated(self) -> int:
        return self.stats.current[Statistics.ALLOCATED_BYTES]

    def memory_stats(self) -> dict[str, int]:
        with self.lock:
            self._count_inactive_split()
            return self.stats.as_dict()

    def _count_inactive_split(self) -> None:
        """inactive_split: the free blocks of segments partly in use (counted when asked)."""
        for pool, blocks in ((1, self.pools[0]), (2, self.pools[1])):
            split = [block for block in blocks if block.prev is not None or block.next is not None]
            self.stats.set_current(Statistics.INACTIVE_SPLIT, pool, len(split))
            self.stats.set_current(Statistics.INACTIVE_SPLIT_BYTES, pool, sum(block.size for block in split))

    def out_of_memory_message(self, size: int) -> str:
        allocated, reserved = self.allocated(), self.reserved()
        return (
            f"CUDA out of memory. Tried to allocate {format_size(size)}. GPU {self.device} has a total "
            f"capacity of {format_size(self.capacity)} of which {format_size(self.capacity - reserved)} is "
            f"free. Of the allocated memory {format_size(allocated)} is allocated by PyTorch, and "
            f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
            "avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )


def block_storage(block: Block, nbytes: int) -> torch.UntypedStorage:
    """A storage of `nbytes` at the block's address, keeping its segment's memory alive (a
    tensor may outlive the allocator: `deactivate()` leaves device tensors as host tensors)."""
    storage = cast(torch.UntypedStorage, torch._C._construct_storage_from_data_pointer(block.ptr, _HOST, nbytes))
    storage.__dict__["_csan_segment"] = block.segment.memory
    return storage
