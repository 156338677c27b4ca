"""The engine's error list: each error once, with the creation sites of the streams it names.
Torch-free; the tracker keeps one `Reports` and hands it what it finds."""

from __future__ import annotations

from typing import Any

from csan_lint.runtime.cells import Epoch
from csan_lint.runtime.events import AccessRecord, AllocationRecord, RuntimeErrorReport
from csan_lint.runtime.stacks import EMPTY_STACK, Stack, innermost_user_frame


def access_record(epoch: Epoch) -> AccessRecord:
    """An access of the engine's state (an epoch) as reports show it."""
    _seq, stream, operator, access, stack = epoch
    argument = access.argument or ("output" if access.is_output else "")
    return AccessRecord(stream, operator, argument, access.is_write, stack or EMPTY_STACK)


class Reports:
    """Every error so far, deduplicated by (allocation, kind, previous site, current site), where
    a site is (operator, innermost user frame) and an allocation is its allocation site when
    known (a loop that races once per iteration gives one report), else its pointer."""

    def __init__(self) -> None:
        self.errors: list[RuntimeErrorReport] = []
        self.reported: set[tuple[Any, ...]] = set()
        """Keys (sites, kind) of the errors reported so far: each is reported once. A driver
        clears it to have them reported again (the pytest plugin, at each test)."""
        self.stream_sites: dict[int, Stack] = {}
        """Where each stream was made (the latest creation of a handle), for naming it."""
        self.event_sites: dict[int, Stack] = {}
        """Where each event was created (CUDA makes an event at its first record)."""

    def race(
        self,
        kind: str,
        current: Epoch,
        previous: Epoch,
        allocation: AllocationRecord,
        reallocation: AccessRecord | None = None,
    ) -> None:
        """Two accesses of one allocation that are not ordered (and, for a free in use, the
        allocation that may get the freed block)."""
        if allocation.stack:
            where: object = innermost_user_frame(allocation.stack) or allocation.ptr
        else:
            where = allocation.ptr
        key = (
            where,
            kind,
            previous[2],
            innermost_user_frame(previous[4]),
            current[2],
            innermost_user_frame(current[4]),
        )
        if key in self.reported:
            return
        self.reported.add(key)
        again = () if reallocation is None else (reallocation.stream,)
        sites = self._sites_of(current[1], previous[1], allocation.stream, *again)
        self.errors.append(
            RuntimeErrorReport(
                kind,
                access_record(current),
                access_record(previous),
                allocation,
                stream_sites=sites,
                reallocation=reallocation,
            )
        )

    def report(self, kind: str, current: AccessRecord, previous: AccessRecord | None) -> None:
        """Errors that involve no memory (events, capture): deduplicated by kind and sites."""
        key = (
            None,
            kind,
            previous and previous.operator,
            previous and innermost_user_frame(previous.stack),
            current.operator,
            innermost_user_frame(current.stack),
        )
        if key in self.reported:
            return
        self.reported.add(key)
        sites = self._sites_of(current.stream, previous and previous.stream)
        self.errors.append(RuntimeErrorReport(kind, current, previous, None, sites))

    def _sites_of(self, *streams: int | None) -> tuple[tuple[int, Stack], ...]:
        known = self.stream_sites
        return tuple((s, known[s]) for s in dict.fromkeys(streams) if s is not None and s in known)
