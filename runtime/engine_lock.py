"""The one lock around every entry into the engine (tracker.py, torch-free and lock-free):
the dispatch mode, the gpu_trace callbacks and the wrappers of untraced entry points take
turns, from whichever threads run CUDA work."""

from __future__ import annotations

import threading
from collections.abc import Callable


class EngineLock:
    """A reentrant lock that can hold back work until its holder leaves: a storage's death (a
    free callback, a pinned host block's end) may come on the thread that is inside the engine,
    from a garbage collection that an allocation of the engine's own code set off. Run at
    once, it would change the engine's state under the call that is updating it; an entry that
    finds `inside()` true queues itself with `later()`, and runs when the lock is let go."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._local = threading.local()

    def acquire(self) -> None:
        self._lock.acquire()
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1

    def release(self) -> None:
        local = self._local
        local.depth -= 1
        self._lock.release()
        if not local.depth:
            queued = getattr(local, "queued", None)
            while queued:  # each takes the lock again; it handles its own failures
                queued.pop(0)()

    def __enter__(self) -> EngineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def inside(self) -> bool:
        """Whether this thread holds the lock (an entry now would nest in another)."""
        return bool(getattr(self._local, "depth", 0))

    def later(self, action: Callable[[], None]) -> None:
        """Run `action` once this thread lets the lock go."""
        local = self._local
        queued = getattr(local, "queued", None)
        if queued is None:
            queued = local.queued = []
        queued.append(action)
