"""The one lock around every entry into the engine (tracker.py, torch-free and lock-free):
the dispatch mode, the gpu_trace callbacks and the wrappers of untraced entry points take
turns, from whichever threads run CUDA work."""

from __future__ import annotations

import threading
from collections.abc import Callable


class EngineLock:
    """A reentrant lock that can hold back work until it is let go: a storage's death (a free
    callback, a pinned host block's end) may come on the thread that is inside the engine,
    from a garbage collection that an allocation of the engine's own code set off. Run at
    once, it would change the engine's state under the call that is updating it; an entry that
    finds `inside()` true queues itself with `later()`, and runs when the lock is let go (each
    queued action takes the lock itself)."""

    def __init__(self) -> None:
        lock = threading.RLock()
        # The C methods themselves on the hot path (an op's bookkeeping takes the lock once).
        self.acquire = lock.acquire
        self._release = lock.release
        # RLock's own ownership test (threading.Condition's): whether this thread holds it.
        self.inside: Callable[[], bool] = lock._is_owned  # type: ignore[attr-defined]
        self._queued: list[Callable[[], None]] = []

    def release(self) -> None:
        self._release()
        if self._queued and not self.inside():
            self._run_queued()

    def _run_queued(self) -> None:
        queued = self._queued
        while queued:
            try:
                action = queued.pop(0)
            except IndexError:  # another thread ran the last one
                return
            action()  # it handles its own failures

    def __enter__(self) -> EngineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def later(self, action: Callable[[], None]) -> None:
        """Run `action` once the lock is let go (by the thread that holds it now, or another)."""
        self._queued.append(action)
