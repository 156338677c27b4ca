"""Fixtures for the emulated device: a fresh emulation per test, and a recorder of the
`torch.cuda._gpu_trace` callbacks it fires."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from torch.cuda import _gpu_trace

from csan_lint.runtime import emulation

_REGISTRIES = {
    "stream_created": _gpu_trace.StreamCreationCallbacks,
    "event_created": _gpu_trace.EventCreationCallbacks,
    "event_deleted": _gpu_trace.EventDeletionCallbacks,
    "event_recorded": _gpu_trace.EventRecordCallbacks,
    "event_waited": _gpu_trace.EventWaitCallbacks,
    "allocated": _gpu_trace.MemoryAllocationCallbacks,
    "freed": _gpu_trace.MemoryDeallocationCallbacks,
    "device_synchronized": _gpu_trace.DeviceSynchronizationCallbacks,
    "stream_synchronized": _gpu_trace.StreamSynchronizationCallbacks,
    "event_synchronized": _gpu_trace.EventSynchronizationCallbacks,
}


@pytest.fixture
def device() -> Iterator[None]:
    emulation.activate()
    try:
        yield
    finally:
        emulation.deactivate()


class TraceLog(list):
    """(callback name, *arguments) for every callback fired, in order."""

    def names(self, *, without: tuple[str, ...] = ("stream_created",)) -> list[str]:
        return [entry[0] for entry in self if entry[0] not in without]

    def of(self, name: str) -> list[tuple]:
        return [entry[1:] for entry in self if entry[0] == name]


@pytest.fixture
def trace(device: None) -> Iterator[TraceLog]:
    log = TraceLog()
    added = []
    for name, registry in _REGISTRIES.items():

        def callback(*args: object, name: str = name) -> None:
            log.append((name, *args))

        registry.add_callback(callback)
        added.append((registry, callback))
    try:
        yield log
    finally:
        for registry, callback in added:
            registry.callback_list.remove(callback)
