"""Jobs dealt to worker processes, started at once and waited for when their results are asked
for: the engine's parse of the files the prefilter keeps, and the syntax checks `--confirm`
leaves running in the background while its tests start.

The process pool module is imported only here, and only by a run with enough to do.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

Job = TypeVar("Job")
Outcome = TypeVar("Outcome")

Progress = Callable[[int, int], None]
"""Called with (jobs done, jobs) as chunks finish."""


BACKGROUND_NICENESS = 10
"""How much lower a background worker's priority is: the tests started meanwhile come first."""
BACKGROUND_CHUNKS = 16
"""Chunks per background worker: small enough that the caller, once it waits, runs the chunks
not started yet itself at its own priority (`Dealt.results`)."""


def deal(costs: Sequence[int], workers: int, per_worker: int = 4) -> list[list[int]]:
    """The jobs' indexes, costliest first, dealt round-robin into a few chunks per worker: chunks
    of about equal cost, the costliest started first, so that no worker is left with a long tail."""
    order = sorted(range(len(costs)), key=lambda index: -costs[index])
    count = min(len(order), workers * per_worker)
    return [order[start::count] for start in range(count)]


def started_pool(workers: int, preload: str) -> ProcessPoolExecutor:
    """A pool whose processes start now and import `preload` while the caller still prepares
    their work (on a big tree, walking and prefiltering its files: libcst's import overlaps it)."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers, initializer=importlib.import_module, initargs=(preload,))
    pool.submit(int)  # the first job starts the processes
    return pool


class Dealt(Generic[Job, Outcome]):
    """`run` over `work` in `workers` processes, a chunk per call; `failed(job, error)` stands
    for the outcome of each job of a chunk whose worker died (killed, out of memory).
    `background`: work left running while the caller does something more urgent (`--confirm`'s
    tests), in workers of lower priority, as many small chunks. `pool`: processes already
    started (`started_pool`), shut down with this one's."""

    def __init__(
        self,
        run: Callable[[list[Job]], list[Outcome]],
        work: Sequence[Job],
        costs: Sequence[int],
        workers: int,
        failed: Callable[[Job, Exception], Outcome],
        background: bool = False,
        pool: ProcessPoolExecutor | None = None,
    ) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self._run = run
        self._work = work
        self._failed = failed
        chunks = deal(costs, workers, BACKGROUND_CHUNKS if background else 4)
        self._pool = pool or ProcessPoolExecutor(
            max_workers=max(1, min(workers, len(chunks))), initializer=_lower_priority if background else None
        )
        self._futures = [(chunk, self._pool.submit(run, [work[index] for index in chunk])) for chunk in chunks]

    def results(self, progress: Progress | None = None) -> list[Outcome]:
        """Every job's outcome, in the order of `work`; the pool is shut down after. A chunk no
        worker has taken yet is run here instead."""
        results: dict[int, Outcome] = {}
        finished = 0
        try:
            for chunk, future in self._futures:
                try:
                    outcomes = self._run([self._work[index] for index in chunk]) if future.cancel() else future.result()
                except Exception as error:
                    outcomes = [self._failed(self._work[index], error) for index in chunk]
                for index, outcome in zip(chunk, outcomes, strict=True):
                    results[index] = outcome
                finished += len(chunk)
                if progress is not None:
                    progress(finished, len(self._work))
        finally:
            self._pool.shutdown()
        return [results[index] for index in range(len(self._work))]

    def cancel(self) -> None:
        """Drop the chunks not started; the running ones finish in the workers, unwaited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _lower_priority() -> None:
    if hasattr(os, "nice"):  # not on Windows: the workers keep the caller's priority there
        os.nice(BACKGROUND_NICENESS)
