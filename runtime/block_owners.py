"""Which test allocated each live device block, for the `pytest --csan` plugin: a free-in-use
race is found when the block dies or is reused, maybe after its test ended, and is charged to
the test that allocated it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csan_lint.runtime.events import RuntimeErrorReport

FREED_KEPT = 4096
"""Freed blocks whose allocating test is remembered for a free-in-use reported at a later
allocation (the oldest is forgotten past it: that race is then charged to the running test)."""


class BlockOwners:
    """Which test allocated each live device block (gpu_trace's allocation callbacks), so that
    a free-in-use race is charged to that test whenever the block dies and is reused."""

    def __init__(self) -> None:
        self.test: str | None = None
        self.by_block: dict[int, str | None] = {}
        self.freed: dict[int, str | None] = {}  # the last block freed at each address: its test
        self._callbacks: list[tuple[Any, Any]] = []

    def register(self) -> None:
        """(Again) last in the callback lists: the sanitizer reports a free before we forget it."""
        import torch.cuda._gpu_trace as gpu_trace

        self.unregister()
        self._callbacks = [
            (gpu_trace.MemoryAllocationCallbacks, self._allocated),
            (gpu_trace.MemoryDeallocationCallbacks, self._freed),
        ]
        for registry, callback in self._callbacks:
            registry.add_callback(callback)

    def unregister(self) -> None:
        for registry, callback in self._callbacks:
            if callback in registry.callback_list:
                registry.callback_list.remove(callback)
        self._callbacks = []

    def _allocated(self, ptr: int) -> None:
        self.by_block[ptr] = self.test

    def _freed(self, ptr: int) -> None:
        self.freed.pop(ptr, None)
        self.freed[ptr] = self.by_block.pop(ptr, None)
        if len(self.freed) > FREED_KEPT:
            del self.freed[next(iter(self.freed))]

    def charged(self, report: RuntimeErrorReport, running: str | None) -> str | None:
        """The test a race belongs to: for a free in use, the test that allocated the block
        (the running one when the block was allocated outside any test)."""
        from csan_lint.runtime import kinds

        if report.kind != kinds.FREE_IN_USE or report.allocation is None:
            return running
        return self.freed.get(report.allocation.ptr) or running
