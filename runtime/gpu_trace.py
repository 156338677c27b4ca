"""Wiring of `torch.cuda._gpu_trace` callbacks (fired by the CUDA runtime on a GPU, and by the
emulated device on CPU) into the tracker, with a clean way out: torch's CallbackRegistry has
no unregister, so we remove our own callbacks from its list.

`torch._C._activate_gpu_trace()` cannot be undone: once called, torch's C++ calls the
registries' `fire_callbacks` (Python, with the GIL) for every CUDA event, stream sync and
allocation of the process. So it is called once per process, and while the sanitizer is
disabled the registries hold none of our callbacks: what still runs is torch's own loop over an
empty list (a GIL round trip per CUDA event; benchmarks/gpu/ measures it). No torch API turns
the C++ side off again."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.cuda._gpu_trace as gpu_trace

from csan_lint.runtime.devices import DeviceStreams
from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.stacks import Stack


class GpuTraceHooks:
    """Forwards the trace callbacks to `tracker`; memory allocations go to `pending` (ptr ->
    (stream, stack) at allocation) until an op shows their size. `on_internal_error` receives
    our own failures (the registry would only log them); `after` runs after each callback;
    `lock` keeps the tracker consistent when callbacks come from several threads."""

    def __init__(
        self,
        tracker: Any,
        pending: dict[int, Any],
        on_internal_error: Callable[[BaseException], None],
        *,
        current_stream: Callable[[], int],
        after: Callable[[], None],
        lock: EngineLock,
        stack: Callable[[], Stack],
        streams: DeviceStreams | None = None,
    ) -> None:
        self.tracker = tracker
        # Several devices (a real GPU machine): stream handles become per-device engine ids.
        self.streams = streams
        self.pending = pending
        self.current_stream = current_stream
        self.on_internal_error = on_internal_error
        self.after = after
        self.lock = lock
        self.stack = stack
        self.active = True
        self._registered: list[tuple[Any, Callable[..., None]]] = []

    def register(self, real_cuda: bool) -> None:
        """Add our callbacks; on a real GPU also switch the C++ side's tracing on (it fires
        the callbacks only once a Python tracer asked for them)."""
        if self._registered:
            return
        if real_cuda:
            activate_cuda_trace()
        t = self.tracker
        # Several devices: stream handles become per-device engine ids (each callback fires
        # under its stream's device).
        keyed: Callable[[int], int] = self.streams.key if self.streams is not None else _same

        def stream_created(stream: int) -> None:
            t.stream_created(keyed(stream))

        def event_recorded(event: int, stream: int) -> None:
            t.event_recorded(event, keyed(stream))

        def event_waited(event: int, stream: int) -> None:
            t.event_waited(event, keyed(stream))

        def stream_synchronized(stream: int) -> None:
            t.stream_synchronized(keyed(stream))

        def event_created(event: int) -> None:
            t.event_created(event, stack=self.stack())  # CUDA makes an event at its first record

        wiring: list[tuple[Any, Callable[..., None]]] = [
            (gpu_trace.StreamCreationCallbacks, stream_created),
            (gpu_trace.EventCreationCallbacks, event_created),
            (gpu_trace.EventDeletionCallbacks, t.event_deleted),
            (gpu_trace.EventRecordCallbacks, event_recorded),
            (gpu_trace.EventWaitCallbacks, event_waited),
            (gpu_trace.DeviceSynchronizationCallbacks, self._device_synchronized),
            (gpu_trace.StreamSynchronizationCallbacks, stream_synchronized),
            (gpu_trace.EventSynchronizationCallbacks, t.event_synchronized),
            (gpu_trace.MemoryAllocationCallbacks, self._allocated),
            (gpu_trace.MemoryDeallocationCallbacks, self._freed),
        ]
        for registry, target in wiring:
            callback = self._guarded(target)
            registry.add_callback(callback)
            self._registered.append((registry, callback))

    def unregister(self) -> None:
        for registry, callback in self._registered:
            try:
                registry.callback_list.remove(callback)
            except ValueError:
                pass  # someone cleared the registry already
        self._registered.clear()

    def _guarded(self, target: Callable[..., None]) -> Callable[..., None]:
        lock = self.lock

        def callback(*args: Any) -> None:
            if not self.active:
                return
            if lock.inside():  # a storage died inside an engine call (a garbage collection there)
                lock.later(partial(callback, *args))
                return
            try:
                # acquire/release, not `with`: the context manager protocol costs twice as much.
                lock.acquire()
                try:
                    target(*args)
                finally:
                    lock.release()
                self.after()
            except Exception as exc:  # the registry would log and carry on; we report it
                self.active = False
                self.on_internal_error(exc)

        return callback

    def _device_synchronized(self) -> None:
        synced = None if self.streams is None else self.streams.synced_by_device_sync()
        if synced is None:
            self.tracker.device_synchronized()
            return
        for stream in synced:  # only the current device's streams
            self.tracker.stream_synchronized(stream)

    def _allocated(self, ptr: int) -> None:
        # The caching allocator hands the block to the current stream.
        self.pending[ptr] = (self.current_stream(), self.stack())

    def _freed(self, ptr: int) -> None:
        # A block no op ever showed has no shadow state to release.
        if self.pending.pop(ptr, None) is None:
            self.tracker.freed(ptr, stack=self.stack())


_cuda_trace_active = False


def activate_cuda_trace() -> bool:
    """Switch torch's C++ tracing on, once per process; whether this call did it."""
    global _cuda_trace_active
    if _cuda_trace_active:
        return False
    torch._C._activate_gpu_trace()
    _cuda_trace_active = True
    return True


def our_callbacks() -> int:
    """How many callbacks of this module the registries hold now (0 while disabled)."""
    return sum(
        getattr(callback, "__qualname__", "").startswith(GpuTraceHooks._guarded.__qualname__)
        for name in REGISTRY_NAMES
        for callback in getattr(gpu_trace, name).callback_list
    )


REGISTRY_NAMES = (
    "StreamCreationCallbacks",
    "EventCreationCallbacks",
    "EventDeletionCallbacks",
    "EventRecordCallbacks",
    "EventWaitCallbacks",
    "DeviceSynchronizationCallbacks",
    "StreamSynchronizationCallbacks",
    "EventSynchronizationCallbacks",
    "MemoryAllocationCallbacks",
    "MemoryDeallocationCallbacks",
)
"""The `torch.cuda._gpu_trace` registries the hooks use (torch internals: torch_internals.py)."""


def _same(stream: int) -> int:
    return stream
