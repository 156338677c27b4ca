"""The access state of one byte interval of an allocation, and how an access is checked against
it and recorded in it. Torch-free; the tracker keeps one `Cell` per interval.

A cell keeps the last write and each stream's last read that touched all of it (FastTrack's
state: never a growing list of reads), and `partial`, what a later access may still race
besides them: strided accesses, which touch only some of its bytes (compared exactly,
extents.py), and accesses a write was not ordered after (its race was reported, but an access
ordered after that write only races them too). That list is short and capped: past PARTIAL_CAP
entries, one stream's are widened into one over the whole interval (an over-approximation,
counted)."""

from __future__ import annotations

from csan_lint.runtime.events import Access
from csan_lint.runtime.extents import MAY_OVERLAP, OVERLAP, Pattern, overlap, pattern
from csan_lint.runtime.stacks import Stack

# An epoch: (seq, stream, operator, access, stack); one small tuple per access, built only once.
Epoch = tuple[int, int, str, Access, Stack | None]
Clock = dict[int, int]

PARTIAL_CAP = 64
"""Entries a cell keeps besides its last write and reads before widening one stream's."""

READ_AFTER_WRITE, WRITE_AFTER_READ, WRITE_AFTER_WRITE = range(3)
"""A race's kind, as an index into the caller's kinds (device or host)."""

Race = tuple[int, Epoch]
"""(kind index, the earlier access the current one races)."""


class Cell:
    """Access state of one byte interval (see the module docstring); `partial` is None when
    there is nothing besides the last write and reads, the common case."""

    __slots__ = ("partial", "reads", "write")

    def __init__(
        self, write: Epoch | None = None, reads: dict[int, Epoch] | None = None, partial: list[Epoch] | None = None
    ) -> None:
        self.write = write
        self.reads: dict[int, Epoch] = reads if reads is not None else {}
        self.partial = partial

    def copy(self) -> Cell:
        return Cell(self.write, dict(self.reads), list(self.partial) if self.partial else None)

    def check(
        self, lo: int, hi: int, clock: Clock, epoch: Epoch, shape: Pattern | None, is_write: bool
    ) -> tuple[list[Race], int]:
        """Check one access against this interval [lo, hi), then record it: the races found and
        how many overlaps were over-approximated. `shape` None: the access touches the whole
        interval; else only the bytes of its pattern that lie in it. `clock` is the accessing
        stream's: its own entry is the current seq, so its earlier accesses are always ordered."""
        access = epoch[3]
        write, reads, partial = self.write, self.reads, self.partial
        races: list[Race] = []
        approximated = 0
        # The last write, if this access is not ordered after it.
        unordered_write = write if write is not None and clock.get(write[1], 0) < write[0] else None
        if unordered_write is not None:
            found = _shares(unordered_write, access, shape, lo, hi)
            if found:
                races.append((WRITE_AFTER_WRITE if is_write else READ_AFTER_WRITE, unordered_write))
                approximated += found == MAY_OVERLAP
        unordered_reads = None  # the reads a write is not ordered after: they stay
        if is_write:
            for read in reads.values():
                if clock.get(read[1], 0) < read[0]:
                    if unordered_reads is None:
                        unordered_reads = {}
                    unordered_reads[read[1]] = read
                    found = _shares(read, access, shape, lo, hi)
                    if found:
                        races.append((WRITE_AFTER_READ, read))
                        approximated += found == MAY_OVERLAP
        for previous in partial or ():
            was_write = previous[3].is_write
            if (is_write or was_write) and clock.get(previous[1], 0) < previous[0]:
                found = _shares(previous, access, shape, lo, hi)
                if found:
                    kind = WRITE_AFTER_READ if not was_write else WRITE_AFTER_WRITE if is_write else READ_AFTER_WRITE
                    races.append((kind, previous))
                    approximated += found == MAY_OVERLAP
        if shape is not None:
            approximated += self._add_partial(epoch, lo, hi)
        elif is_write:
            # What this write is ordered after it also covers: gone. The rest may race later accesses.
            kept = [p for p in partial if clock.get(p[1], 0) < p[0]] if partial else []
            if unordered_write is not None:
                kept.append(unordered_write)
            if unordered_reads is None:
                reads.clear()
            else:
                self.reads = unordered_reads
            self.write = epoch
            self.partial = kept or None
        else:
            stream = epoch[1]
            reads[stream] = epoch
            if partial:  # this stream's strided reads are covered by this one
                self.partial = [p for p in partial if p[1] != stream or p[3].is_write] or None
        return races, approximated

    def _add_partial(self, epoch: Epoch, lo: int, hi: int) -> int:
        """Remember a strided access; it replaces this stream's earlier one on the same bytes
        (a read replaces only a read: the write may still race a later access). 1 if that
        widened the list (an over-approximation), else 0."""
        stream, access = epoch[1], epoch[3]
        partial = [
            p
            for p in self.partial or ()
            if not (
                p[1] == stream
                and p[3][:2] == access[:2]
                and p[3].layout == access.layout
                and (access.is_write or not p[3].is_write)
            )
        ]
        partial.append(epoch)
        widened = len(partial) > PARTIAL_CAP
        self.partial = _widen(partial, stream, lo, hi) if widened else partial
        return widened


def _shares(previous: Epoch, access: Access, shape: Pattern | None, lo: int, hi: int) -> int:
    """Whether a remembered access and the current one share a byte of the interval [lo, hi):
    an answer of extents.overlap."""
    other = previous[3]
    other_shape = pattern(other.ptr, other.layout) if other.layout is not None else None
    if shape is None and other_shape is None:
        return OVERLAP  # both touch the whole interval
    return overlap((access.ptr, access.size), shape, (other.ptr, other.size), other_shape, lo, hi)


def _widen(partial: list[Epoch], stream: int, lo: int, hi: int) -> list[Epoch]:
    """One stream's reads, and its writes, as one access each: the latest, over the whole
    interval. Safe (a stream ordered after the latest is ordered after all), not exact."""
    kept = [p for p in partial if p[1] != stream]
    for is_write in (False, True):
        mine = [p for p in partial if p[1] == stream and p[3].is_write == is_write]
        if mine:
            seq, _, operator, access, stack = max(mine, key=lambda p: p[0])
            kept.append((seq, stream, operator, access._replace(ptr=lo, size=hi - lo, layout=None), stack))
    return kept
