"""Threads that create streams and events, allocate, launch and synchronize at once, on two
emulated devices: every handle is unique, every launch is counted, and the caching allocators'
statistics balance, as a GPU's driver and allocator keep them (c10's allocator takes its mutex
in malloc, free and recordStream)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime import emulation
from csan_lint.runtime.emulation import streams
from csan_lint.runtime.emulation.machine import DEVICES_VARIABLE
from csan_lint.runtime.sanitizer import Sanitizer

THREADS = 8
ROUNDS = 25


@pytest.fixture
def two_devices_switching_often(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Two devices, and threads that interleave at nearly every bytecode."""
    monkeypatch.setenv(DEVICES_VARIABLE, "2")
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    emulation.activate()
    try:
        yield
    finally:
        emulation.deactivate()
        sys.setswitchinterval(previous)


def _in_threads(work: Callable[[int], None], count: int = THREADS) -> list[BaseException]:
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as failure:  # each one fails the test
            failures.append(failure)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def _make_streams_events_and_blocks(index: int, made: list[tuple[torch.cuda.Stream, int]]) -> None:
    with torch.cuda.device(index % 2):
        for step in range(ROUNDS):
            stream = torch.cuda.Stream(priority=-(step % 2))
            with torch.cuda.stream(stream):
                block = torch.empty(256 * (index + 1) + step, device="cuda")
                block.fill_(1.0)
                event = torch.cuda.Event()
                event.record()
                made.append((stream, event.event_id))
                event.synchronize()
                del block


@pytest.mark.usefixtures("two_devices_switching_often")
def test_threads_creating_streams_events_and_blocks_get_unique_handles_and_balanced_statistics() -> None:
    created_events: list[int] = []
    _gpu_trace.EventCreationCallbacks.add_callback(created_events.append)
    before = [torch.cuda.memory_stats(device) for device in (0, 1)]
    made: list[tuple[torch.cuda.Stream, int]] = []
    try:
        failures = _in_threads(lambda index: _make_streams_events_and_blocks(index, made))
    finally:
        _gpu_trace.EventCreationCallbacks.callback_list.remove(created_events.append)
    assert failures == []
    assert len(made) == THREADS * ROUNDS
    events = [event for _, event in made]
    assert len(set(events)) == len(events) and sorted(created_events) == sorted(events)
    for stream, _ in made:  # a pool stream of its own device, at its priority's slots
        assert stream.cuda_stream >> 8 == stream.device_index and stream.priority in (0, -1)
    # Each device's pool hands its 32 slots per priority round-robin: all used, none twice more.
    for device in (0, 1):
        handles = [stream.cuda_stream for stream, _ in made if stream.device_index == device]
        assert len(set(handles)) == 64 and max(handles.count(handle) for handle in set(handles)) <= 2
        after = torch.cuda.memory_stats(device)
        for key in ("allocation.all.current", "allocated_bytes.all.current", "active_bytes.all.current"):
            assert after[key] == before[device][key], key
        allocations = after["allocation.all.allocated"] - before[device]["allocation.all.allocated"]
        assert allocations == after["allocation.all.freed"] - before[device]["allocation.all.freed"]
        assert allocations == THREADS // 2 * ROUNDS


@pytest.mark.usefixtures("two_devices_switching_often")
def test_launches_from_many_threads_are_all_counted_while_another_thread_synchronizes() -> None:
    x = torch.ones(16, device="cuda:0")
    finished: list[int] = []
    before = sum(streams.launched.values())

    def launch_or_synchronize(index: int) -> None:
        if index == 0:
            while len(finished) < THREADS - 1:
                torch.cuda.synchronize(0)  # counts what is done while launches come in
            return
        try:
            for step in range(ROUNDS * 4):
                if step % 10 == 0:  # a new stream: a new entry in the launch counts
                    with torch.cuda.stream(torch.cuda.Stream()):
                        x.add(1)
                else:
                    x.add(1)
        finally:
            finished.append(index)

    failures = _in_threads(launch_or_synchronize)
    assert failures == []
    assert sum(streams.launched.values()) - before == (THREADS - 1) * ROUNDS * 4
    torch.cuda.synchronize()
    assert all(not streams.pending(stream) for stream in streams.launched)


@pytest.mark.usefixtures("two_devices_switching_often")
def test_the_sanitizer_sees_every_thread_and_reports_nothing_on_their_ordered_work() -> None:
    made: list[tuple[torch.cuda.Stream, int]] = []
    with Sanitizer(device="emulated") as sanitizer:
        failures = _in_threads(lambda index: _make_streams_events_and_blocks(index, made))
        assert failures == []
        assert sanitizer.errors == []
        # Both devices' pools (32 slots x 4 priorities each) and the default stream.
        assert sanitizer.tracker.stats()["streams"] >= 2 * 128
