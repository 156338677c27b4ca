"""Threads pin host tensors while the main thread copies each to the device non-blocking and
drops it (tensordict's `to(device, non_blocking_pin=True, num_threads=N)`): every copy must
carry its own tensor's values, and the sanitizer must see no race and no failure of its own."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator

import pytest
import torch

from csan_lint.runtime import sanitize

ROUNDS = 40
THREADS = 4
TENSORS = 8


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Threads interleave at nearly every bytecode: a race shows in every run, not one in ten."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _pin(sources: list[torch.Tensor], indices: range, ready: queue.SimpleQueue[tuple[int, torch.Tensor]]) -> None:
    for index in indices:
        ready.put((index, sources[index].pin_memory()))


def _pin_in_threads_and_copy() -> int:
    """Rounds of worker threads pinning tensors while this thread copies them to the device
    non-blocking and drops them; how many device copies differ from their source."""
    wrong = 0
    for _ in range(ROUNDS):
        sources = [torch.randn(64) for _ in range(TENSORS)]
        ready: queue.SimpleQueue[tuple[int, torch.Tensor]] = queue.SimpleQueue()

        workers = [
            threading.Thread(target=_pin, args=(sources, range(k, TENSORS, THREADS), ready)) for k in range(THREADS)
        ]
        for worker in workers:
            worker.start()
        copies = {}
        while len(copies) < TENSORS:
            index, pinned = ready.get(timeout=30)
            copies[index] = pinned.to("cuda", non_blocking=True)
            del pinned  # the block goes back to the pool while its copy may be pending
        for worker in workers:
            worker.join()
        torch.cuda.synchronize()
        wrong += sum(not torch.equal(copies[index].cpu(), sources[index]) for index in range(TENSORS))
    return wrong


def test_threads_pinning_while_copies_are_pending_get_blocks_of_their_own(device, frequent_thread_switches):
    assert _pin_in_threads_and_copy() == 0


def test_sanitizer_sees_no_race_in_threads_pinning_while_copies_are_pending(frequent_thread_switches):
    with sanitize(device="emulated") as sanitizer:
        wrong = _pin_in_threads_and_copy()
    assert wrong == 0
    assert sanitizer.internal_errors == []
    assert [error.kind for error in sanitizer.errors] == []
