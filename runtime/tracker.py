"""The happens-before engine: vector clocks per stream and for the host (clocks.py: what is
ordered after what), FastTrack-style state per allocation (here: what each access is checked
against). Torch-free; fed by the same calls live (torch integration) and from a trace.

Memory. Per allocation, the byte range is cut into intervals (one for the whole block, the
common case), each with its access state (cells.py): the last write epoch and the last read
epoch per stream, never a growing list of reads (CSAN's cost grows with the reads since the
last write), and what a later access may still race besides them (strided accesses, accesses
a write was not ordered after). A contiguous access cuts intervals at its ends; a strided one
cuts none and is compared byte-exactly with what each interval it spans holds.

Allocations. A new block may be one that earlier work on its stream used: the allocating
stream's last launch before the allocation stands as a write of the whole block (not a new
launch), so that a stream not ordered after it races the block's earlier use.

Frees. The caching allocator hands a freed block (no `record_stream`) to a later allocation on
its stream at once, so a free is a hazard only if that allocation comes before the stream is
ordered after the other streams' uses: the free-in-use is reported at such a reallocation
(reuse.py says which allocations may get the block), naming the free, the use and the
reallocation. A free whose stream is ordered after those uses before it allocates again
(`s.wait_stream(other)`) is safe, and so is one never followed by an allocation on its stream:
nothing reuses the block (the allocator gives cached blocks back to the driver only through
`cudaFree`, which waits for the device), so nothing is reported at the end of a run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from csan_lint.runtime import kinds
from csan_lint.runtime.blocks import Allocation, Blocks
from csan_lint.runtime.cells import Cell, Clock, Epoch
from csan_lint.runtime.clocks import Clocks
from csan_lint.runtime.cuda_semantics import may_serve
from csan_lint.runtime.events import (
    HOST,
    Access,
    AccessRecord,
    RuntimeErrorReport,
)
from csan_lint.runtime.extents import Pattern, is_approximated, pattern
from csan_lint.runtime.reuse import FreedBlock, FreedBlocks
from csan_lint.runtime.stacks import EMPTY_STACK, Stack

FREE_OPERATOR = "free"
REALLOCATION_OPERATOR = "reallocation"
"""The operator of the allocation a freed block may be handed out to (a free-in-use's third site)."""
ALLOCATION_OPERATOR = "allocation"
"""The operator of an allocation's pseudo-write: the block's earlier use on its stream."""

_new_access = tuple.__new__  # Access(...) without the Python-level NamedTuple constructor (hot paths)

_DEVICE_KINDS = (kinds.READ_AFTER_WRITE, kinds.WRITE_AFTER_READ, kinds.WRITE_AFTER_WRITE)
_HOST_KINDS = (kinds.HOST_READ_PENDING, kinds.HOST_WRITE_PENDING, kinds.HOST_WRITE_PENDING)


class Tracker(Clocks):
    """Consumes stream, event, memory and kernel events; collects every error (`Reports`). The
    ordering of streams, events, syncs and captures is its base's (`Clocks`); the memory state
    and the accesses checked against that ordering are here."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks = Blocks()
        self._allocations = self._blocks.by_base  # read directly on the hot path
        self._bases = self._blocks.bases
        self._freed = FreedBlocks()  # freed blocks another stream may still use, until reused
        self._approximated = 0

    # -- results -------------------------------------------------------------------------

    @property
    def errors(self) -> list[RuntimeErrorReport]:
        """All errors so far (warnings included, see `RuntimeErrorReport.severity`), in detection
        order. The engine's own list, not a copy (callers poll it per launch): do not mutate it."""
        return self._errors

    def stats(self) -> dict[str, int]:
        """Sizes of the shadow state, to show it stays bounded, and how many times an overlap was
        over-approximated (a strided layout or a scan too large for an exact answer, a widening)."""
        return {
            "streams": len(self._streams),
            "events": len(self._events),
            "allocations": len(self._allocations),
            "freed_in_use": len(self._freed),
            "intervals": sum(len(a.cells) for a in self._allocations.values()),
            "reads": sum(len(c.reads) for a in self._allocations.values() for c in a.cells),
            "partial": sum(len(c.partial or ()) for a in self._allocations.values() for c in a.cells),
            "approximated": self._approximated,
            "errors": len(self._errors),
        }

    # -- memory ------------------------------------------------------------------------------

    def allocated(self, ptr: int, size: int, stream: int | None, stack: Stack | None = None) -> None:
        """A new block. Blocks it overlaps were freed without us seeing it: forget them (backfill).
        `stream` None: a block no stream owns (pinned host memory: the host allocator itself
        waits for the copies using it), so its free is not checked. Otherwise the stream's last
        launch stands as a write of the block (see the module docstring)."""
        if size <= 0:
            return  # a zero-size block holds no bytes: nothing can race on it
        self._blocks.forget_overlapping(ptr, ptr + size)
        if len(self._freed):
            self._check_reuse(ptr, size, stream, stack)
        write = None
        if stream is not None and self._capture is None:  # a capture allocates from the graph's own pool
            last = self._clock(stream).get(stream, 0)
            if last:
                access = _new_access(Access, (ptr, size, True, "", False, None))
                write = (last, stream, ALLOCATION_OPERATOR, access, stack)
        self._blocks.add(Allocation(ptr, ptr + size, stream, stack, False, write))

    def freed(self, ptr: int, stack: Stack | None = None) -> None:
        """The block goes back to its stream's pool. Another stream's accesses not ordered before
        that stream's next work (on a blocking stream or the default one, that work also waits
        for the legacy default stream's ordering) nor covered by record_stream are kept with it,
        to check the allocation it may be handed out to (the module docstring)."""
        allocation = self._allocations.get(ptr)
        if allocation is None:
            return  # allocated before we were watching, never used since: nothing to check
        owner = allocation.stream
        if owner is not None:
            clock = self._issue_clock(owner)
            recorded = allocation.recorded or ()
            uses: dict[tuple[int, int], Epoch] = {}  # one per launch, however many intervals it spans
            for cell in allocation.cells:
                for epoch in (cell.write, *cell.reads.values(), *(cell.partial or ())):
                    # The owner's own accesses are ordered; the host's are the host allocator's to wait for.
                    if epoch is not None and epoch[1] not in (owner, HOST) and epoch[1] not in recorded:
                        if clock.get(epoch[1], 0) < epoch[0]:
                            uses[epoch[0], epoch[1]] = epoch
            if uses:
                access = _new_access(Access, (allocation.ptr, allocation.end - allocation.ptr, True, "", False, None))
                free = (self._seq, owner, FREE_OPERATOR, access, stack)
                self._freed.add(FreedBlock(allocation.record(), free, list(uses.values())))
        self._blocks.remove(allocation)

    def _check_reuse(self, ptr: int, size: int, stream: int | None, stack: Stack | None) -> None:
        """An allocation on `stream` may get a freed block: the one at its bytes, or one its pool
        may hand out (reuse.py). Each use of that block `stream` is not ordered after races it.
        A freed block of this stream's that it is now ordered after is retired: safe for good."""
        freed = self._freed
        reused = freed.take_overlapping(ptr, ptr + size)
        if stream is None or self._capture is not None:
            return  # pinned host memory, or a graph's private pool: never a stream pool's block
        clock = self._issue_clock(stream)
        reallocation = AccessRecord(stream, REALLOCATION_OPERATOR, "", True, stack or EMPTY_STACK)
        for block in freed.of_stream(stream):
            unordered = [use for use in block.uses if clock.get(use[1], 0) < use[0]]
            if not unordered or may_serve(block.allocation.size, size):
                freed.remove(block)
                if unordered:
                    reused.append(block._replace(uses=unordered))
            else:
                block.uses[:] = unordered
        for block in reused:
            for use in block.uses:
                if use[1] != stream and clock.get(use[1], 0) < use[0]:
                    self._reports.race(kinds.FREE_IN_USE, block.free, use, block.allocation, reallocation)

    def stream_recorded(self, ptr: int, stream: int) -> None:
        """`record_stream(stream)` on the block holding ptr: the allocator will wait for that
        stream's work up to the free."""
        allocation = self._blocks.find(ptr)
        if allocation is not None:
            if allocation.recorded is None:
                allocation.recorded = set()
            allocation.recorded.add(stream)

    def last_write(self, ptr: int) -> tuple[int, str] | None:
        """The stream (HOST for the host) and operator of the last write to the byte at `ptr`;
        None where nothing was written, or the block is unknown (facts about a function's
        arguments, runtime/facts_recorder.py)."""
        write = self._blocks.last_write(ptr)
        return None if write is None else (write[1], write[2])

    # -- accesses ------------------------------------------------------------------------------

    def kernel_launched(
        self,
        stream: int,
        operator: str,
        accesses: Sequence[Access],
        stack: Stack | None = None,
        outside_capture: bool = False,
    ) -> None:
        """A kernel on `stream` touching `accesses`; the hot path. `outside_capture`: launched
        by another thread than the one capturing a graph, on a stream outside the graph: live
        work, which the capture's fork rule does not police."""
        self._seq = seq = self._seq + 1
        state = self._streams.get(stream)
        if state is None or state.host_version != self._host_version:
            clock = self._clock(stream)
        else:
            clock = state.clock
        if self._blocking and (stream in self._legacy_defaults or stream in self._blocking):
            self._legacy_sync(stream, clock)
        clock[stream] = seq
        if self._capture is not None and not outside_capture:
            unjoined = self._capture.launched(stream, operator, stack, seq)
            if unjoined is not None:
                self._reports.report(kinds.UNJOINED_CAPTURE_FORK, *unjoined)
        allocations = self._allocations
        for access in accesses:
            ptr, size, is_write, _argument, _is_output, layout = access
            if size <= 0:
                continue  # zero-size tensors touch no byte
            epoch = (seq, stream, operator, access, stack)
            if layout is not None:
                shape = self._shape(access)
                if shape is not None:
                    self._access_range(ptr, size, clock, epoch, shape, is_write, _DEVICE_KINDS)
                    continue
            allocation = allocations.get(ptr)
            if allocation is not None and ptr + size == allocation.end and len(allocation.cells) == 1:
                # Whole-block access, whole-block state: the common case, O(1) in the state size.
                # An ordered read or an ordered first write is settled here; the rest in _check.
                cell = allocation.cells[0]
                write = cell.write
                # A write of this stream's own is ordered: no clock lookup.
                if cell.partial is None and (write is None or write[1] == stream or clock.get(write[1], 0) >= write[0]):
                    if not is_write:
                        cell.reads[stream] = epoch
                        continue
                    reads = cell.reads
                    for read in reads.values():
                        if read[1] != stream and clock.get(read[1], 0) < read[0]:
                            break  # a race: _check reports it
                    else:  # every read is ordered before this write (this stream's own always is)
                        reads.clear()
                        cell.write = epoch
                        continue
                self._check(cell, allocation, ptr, ptr + size, clock, epoch, None, is_write, _DEVICE_KINDS)
            else:
                self._access_range(ptr, size, clock, epoch, None, is_write, _DEVICE_KINDS)

    def _shape(self, access: Access) -> Pattern | None:
        """The bytes of a strided access (None: its whole extent), counting over-approximations."""
        assert access.layout is not None
        shape = pattern(access.ptr, access.layout)
        if shape is None and is_approximated(access.ptr, access.layout):
            self._approximated += 1
        return shape

    def host_accessed(self, ptr: int, size: int, is_write: bool, operator: str, stack: Stack | None = None) -> None:
        """The CPU reads or writes (pinned) memory: it must be ordered after pending device work."""
        if size <= 0:
            return
        self._seq = seq = self._seq + 1
        self._host[HOST] = seq
        self._host_version += 1  # later launches are issued after this access
        epoch = (seq, HOST, operator, Access(ptr, size, is_write, ""), stack)
        self._access_range(ptr, size, self._host, epoch, None, is_write, _HOST_KINDS)

    def _access_range(
        self,
        ptr: int,
        size: int,
        clock: Clock,
        epoch: Epoch,
        shape: Pattern | None,
        is_write: bool,
        race_kinds: tuple[str, str, str],
    ) -> None:
        allocation = self._blocks.locate(ptr, size)
        lo, hi = max(ptr, allocation.ptr), min(ptr + size, allocation.end)
        if lo >= hi:
            return
        bounds, cells = allocation.bounds, allocation.cells
        i = bisect_right(bounds, lo) - 1
        j = bisect_left(bounds, hi)
        # A strided access is compared byte-exactly with what each interval holds: it splits none
        # (a loop over a matrix's columns would cut it into two intervals per column).
        if shape is None and bounds[i] != lo:
            bounds.insert(i + 1, lo)
            cells.insert(i + 1, cells[i].copy())
            i += 1
            j += 1
        if shape is None and hi < allocation.end and (j == len(bounds) or bounds[j] != hi):
            bounds.insert(j, hi)
            cells.insert(j, cells[j - 1].copy())
        for k in range(i, j):
            cell_end = bounds[k + 1] if k + 1 < len(bounds) else allocation.end
            self._check(cells[k], allocation, bounds[k], cell_end, clock, epoch, shape, is_write, race_kinds)
        if (
            is_write
            and shape is None
            and j - i > 1
            and not any(cells[k].reads or cells[k].partial for k in range(i, j))
        ):
            # All now hold this write and nothing else: one interval again.
            del bounds[i + 1 : j]
            del cells[i + 1 : j]

    def _check(
        self,
        cell: Cell,
        allocation: Allocation,
        lo: int,
        hi: int,
        clock: Clock,
        epoch: Epoch,
        shape: Pattern | None,
        is_write: bool,
        race_kinds: tuple[str, str, str],
    ) -> None:
        """Check one access against the interval [lo, hi) (see Cell.check) and report its races."""
        races, approximated = cell.check(lo, hi, clock, epoch, shape, is_write)
        self._approximated += approximated
        for kind, previous in races:
            self._reports.race(race_kinds[kind], epoch, previous, allocation.record())
