"""A CPU-time budget for one file's analysis: a safety net, so that a file the analysis is slow
on (a huge generated module, a pathological pattern) becomes a located diagnostic of its own
instead of a run that hangs.

The budget is a one-shot profiling timer (SIGPROF: CPU time, barely moved by other load on the
machine) whose handler raises `BudgetExceeded` into the analysis. Signals only reach the main
thread, so elsewhere (a thread of the language server) and where the platform has no
`setitimer` the analysis runs without one. `collector_paused`: the other resource one file's
analysis is run under.
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class BudgetExceeded(BaseException):
    """Raised into the analysis when its CPU time runs out. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way can swallow it."""


def can_enforce() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Raises BudgetExceeded inside the block once it has used `seconds` of CPU time. At most
    once, and never after the block: a signal still pending when the timer is disarmed is
    ignored, and the previous handler is always restored."""
    if not can_enforce():
        yield
        return
    armed = True

    def expire(signum: int, frame: FrameType | None) -> None:
        if armed:
            raise BudgetExceeded

    previous = signal.signal(signal.SIGPROF, expire)
    try:
        signal.setitimer(signal.ITIMER_PROF, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            armed = False
    finally:
        signal.signal(signal.SIGPROF, previous)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off while one file is parsed and analysed: libcst allocates millions
    of nodes, which the collector walks again and again (a fifth of the CPU of a cold run) and
    never frees (the trees hold no cycles). It runs as usual between files."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
