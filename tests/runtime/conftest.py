"""Synthetic-event helpers for the engine tests (CSAN's TestEventHandler style, no GPU, no torch)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from csan_lint.runtime.events import Access, RuntimeErrorReport
from csan_lint.runtime.tracker import Tracker

SIZE = 64
"""Bytes of each synthetic tensor; tensors sit far apart so they never overlap."""


class Sim:
    """Drives a Tracker with synthetic launches and checks what each launch adds to `errors`."""

    def __init__(self) -> None:
        self.tracker = Tracker()

    @staticmethod
    def tensor(i: int) -> int:
        return 0x10000 * (i + 1)

    @staticmethod
    def stream(i: int) -> int:
        return 1000 + i

    @staticmethod
    def event(i: int) -> int:
        return 2000 + i

    def launch(
        self, on: int, read: Iterable[int] = (), write: Iterable[int] = (), operator: str = "op", stack=None
    ) -> list[RuntimeErrorReport]:
        accesses = [Access(t, SIZE, False, "self") for t in read] + [Access(t, SIZE, True, "out") for t in write]
        before = len(self.tracker.errors)
        self.tracker.kernel_launched(on, operator, accesses, stack)
        return self.tracker.errors[before:]

    def assert_clean(self, on: int, read: Iterable[int] = (), write: Iterable[int] = ()) -> None:
        new = self.launch(on, read, write)
        assert new == [], f"unexpected errors: {[e.kind for e in new]}"

    def assert_race(
        self, on: int, read: Iterable[int] = (), write: Iterable[int] = (), kind: str | None = None
    ) -> list[RuntimeErrorReport]:
        new = self.launch(on, read, write)
        assert new, "expected a race, got none"
        if kind is not None:
            assert {e.kind for e in new} == {kind}
        return new

    def record(self, e: int, on: int) -> None:
        self.tracker.event_recorded(e, on)

    def wait(self, e: int, on: int) -> None:
        self.tracker.event_waited(e, on)


@pytest.fixture
def sim() -> Sim:
    return Sim()
