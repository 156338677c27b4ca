"""The emulated device's streams, events and synchronization: the `torch.cuda` API that GPU
test code calls, firing the `torch.cuda._gpu_trace` callbacks the CUDA build fires, with the
same arguments at the same moments, so a sanitizer sees the same event sequence on CPU.

All work runs at once on the CPU; what matters is the order of the events, not timing.
Queries follow a pending-once policy, so that a program that ignores a query's answer, or
takes its "not done" branch, is still checked: `Stream.query()` answers False once after new
work was launched on the stream (the host cannot know it finished), and True when asked again
with no new work, or after a sync; `Event.query()` answers False once for a record made while
its stream had such work, then True. A polling loop ends on its second query, and only a True
answer orders the host after the work (the sanitizer treats it like a sync).

Several devices (`CSAN_LINT_DEVICES`, default 1): each has its own pool and default stream (which
stream is current, per thread and device: current.py). A pool stream's handle carries its
device; each trace callback fires under the stream's device, as on a GPU.

Streams made by `cudart().cudaStreamCreate` (default flags) are blocking: they synchronize with
the legacy default stream (handle 0). `is_blocking` tells the sanitizer, which asks when an
`ExternalStream` wraps one, as it asks the CUDA runtime on a GPU.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime.cuda_semantics import CAPTURE_FORBIDDEN
from csan_lint.runtime.devices import stream_key
from csan_lint.runtime.emulation import current, machine
from csan_lint.runtime.emulation.current import (
    CUDA_TYPE,
    DEFAULT_STREAM,
    check_device,
    current_handle,
    current_index,
    current_key,
    on_device,
)
from csan_lint.runtime.emulation.gaps import EmulationGap

# c10's pool: 32 streams per priority level, handed out round-robin, for at most 4 levels
# (a modern GPU's priority range is wider and gets clamped to that).
STREAMS_PER_POOL = 32
PRIORITY_LEVELS = 4
_STREAM_TYPE_BITS = 5  # a pool stream's handle: (priority level + 1) << 5 | slot
_DEVICE_SHIFT = 8  # a pool stream of device k: k << 8 | its handle on device 0
RAW_STREAM_BASE = 1 << 20  # handles of streams made outside the pool, above every pool handle


class _Pool:
    """Which pool slot the next `Stream()` of each priority gets on one device, and whether the
    pool exists."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.created = False
        self.counters = [0] * PRIORITY_LEVELS
        self.lock = threading.Lock()

    def take(self, priority: int) -> int:
        with self.lock:
            if not self.created:
                # c10 creates the whole pool on the first request (slot-major), firing one
                # stream-creation callback per stream.
                self.created = True
                with on_device(self.device):
                    for slot in range(STREAMS_PER_POOL):
                        for level in range(PRIORITY_LEVELS):
                            _gpu_trace.StreamCreationCallbacks.fire_callbacks(self.handle(level, slot))
            level = min(max(-int(priority), 0), PRIORITY_LEVELS - 1)
            slot = self.counters[level] % STREAMS_PER_POOL
            self.counters[level] += 1
        return self.handle(level, slot)

    def handle(self, level: int, slot: int) -> int:
        return self.device << _DEVICE_SHIFT | ((level + 1) << _STREAM_TYPE_BITS) | slot


_pools: dict[int, _Pool] = {}
# One Stream object per engine id for current_stream()/default_stream(): a sanitizer asks per op.
_views: dict[int, Stream] = {}
# Event handles never repeat in a process, so an event of an earlier activation can't be
# taken for a new one; `_generation` tells which activation an event was created in.
_event_ids = itertools.count(1)
_generation = 0
# Streams under graph capture (handle -> the graph), and for an event recorded during a
# capture, its graph and what the recording stream had captured: waiting on such an event
# forks the waiting stream into the capture (or joins it back).
capturing: dict[int, Any] = {}
_captured_events: dict[int, tuple[Any, dict[int, int]]] = {}
# Per stream handle: how many launches it had, and how many the host knows are done (a sync,
# or a query that answered True): the rest is pending as far as the program can know.
launched: dict[int, int] = {}
_known_done: dict[int, int] = {}
# Guards those counts: threads launch and synchronize at once (a GPU's driver keeps them safely).
_counts_lock = threading.Lock()
# Handles of the blocking streams made outside the pool (never reused, like event handles),
# with their devices.
_blocking: dict[int, int] = {}
_raw_stream_ids = itertools.count(RAW_STREAM_BASE)


def reset() -> None:
    """Fresh device state: no pool yet, every thread back on device 0's default stream. The
    number of devices is read from `CSAN_LINT_DEVICES`."""
    global _generation
    machine.DEVICE_COUNT = machine.device_count_from_environment()
    _pools.clear()
    current.reset()
    _generation += 1
    _views.clear()
    capturing.clear()
    _captured_events.clear()
    deferred.clear()
    launched.clear()
    _known_done.clear()
    _blocking.clear()


def _pool(device: int) -> _Pool:
    pool = _pools.get(device)
    if pool is None:
        pool = _pools.setdefault(device, _Pool(device))
    return pool


def key_of(stream: Any) -> int:
    """The engine id of a stream object (device k's default stream: -2 - k)."""
    return stream_key(stream.stream_id, stream.device_index)


def device_of(key: int) -> int:
    """The device of the stream with engine id `key`."""
    if key < -1:
        return -2 - key
    if key >= RAW_STREAM_BASE:
        return _blocking.get(key, 0)
    return key >> _DEVICE_SHIFT


# Barriers of copies between devices that the host has not issued yet: they follow the copy,
# which a sanitizer stacked on the emulation sees only when the copy's dispatch returns.
deferred: list[tuple[int, int]] = []


@contextmanager
def between_devices(source: int, destination: int) -> Iterator[None]:
    """A copy between devices (cuda_semantics.COPY_BETWEEN_DEVICES): the source's current stream
    waits for the destination's, the block runs on the destination device (its result is
    allocated there), and after the copy the destination's current stream waits for the source's."""
    source_key, destination_key = current_key(source), current_key(destination)
    _block(view(destination_key).record_event(), view(source_key))
    with on_device(destination):
        yield
    deferred.append((source_key, destination_key))


def flush() -> None:
    """Issue the barriers of the copies between devices made so far (see `between_devices`)."""
    while deferred:
        source_key, destination_key = deferred.pop(0)
        _block(view(source_key).record_event(), view(destination_key))


def create_blocking_stream() -> int:
    """A new stream with CUDA's default flags (`cudaStreamCreate`) on the current device: its
    handle."""
    handle = next(_raw_stream_ids)
    _blocking[handle] = current_index()
    return handle


def destroy_stream(handle: int) -> bool:
    """`cudaStreamDestroy`: whether `handle` was a stream made by `create_blocking_stream`."""
    return _blocking.pop(handle, None) is not None


def is_blocking(handle: int) -> bool:
    """Whether stream `handle` synchronizes with the legacy default stream."""
    return handle in _blocking


def select(handle: int) -> None:
    """Make stream `handle` (an engine id) the calling thread's current stream, its device the
    current device (as autograd's stream guard does for a node)."""
    current.make_current(handle, device_of(handle) if machine.DEVICE_COUNT > 1 else current_index())


def note_launch(handle: int) -> None:
    """Work was launched on stream `handle` (pending until a sync or a True query)."""
    with _counts_lock:
        launched[handle] = launched.get(handle, 0) + 1


def mark_done(handle: int | None = None, upto: int | None = None, device: int | None = None) -> None:
    """The host knows the stream's work (up to launch count `upto`; when `handle` is None, every
    stream's, or every stream's of `device`) is done."""
    with _counts_lock:
        if handle is not None:
            chosen: Any = (handle,)
        elif device is None or machine.DEVICE_COUNT == 1:
            chosen = launched
        else:
            chosen = [stream for stream in launched if device_of(stream) == device]
        for stream in chosen:
            count = launched.get(stream, 0) if upto is None else upto
            if _known_done.get(stream, 0) < count:
                _known_done[stream] = count


def pending(handle: int, upto: int | None = None) -> bool:
    """Whether the host cannot know stream `handle`'s work (up to launch count `upto`) is done."""
    count = launched.get(handle, 0) if upto is None else upto
    return _known_done.get(handle, 0) < count


def forbid_during_capture(handle: int | None = None) -> None:
    """Raise like CUDA for a synchronizing call on `handle` while it is capturing, or, with no
    handle (a device-wide call), while a capture forbids it to this thread: a global capture
    to every thread, a thread-local one to its own, a relaxed one to none."""
    if not capturing:
        return
    if handle is not None:
        if handle in capturing:
            raise RuntimeError(CAPTURE_FORBIDDEN)
        return
    if any(graph.forbids_unsafe_calls() for graph in capturing.values()):
        raise RuntimeError(CAPTURE_FORBIDDEN)


def sleep(cycles: int) -> None:
    """`torch.cuda._sleep`: a spin kernel on the current stream; only its timing is lost."""
    note_launch(current_handle())


_TorchStream = torch._C.Stream
_TorchEvent = torch._C.Event


def _names_cuda(device: Any) -> bool:
    if device is None or isinstance(device, int):
        return True  # the current accelerator: the emulated CUDA device
    return torch.device(device).type == "cuda"


class _DeviceGeneric(type):
    """The metaclass of `GenericStream` and `GenericEvent`, which stand in for `torch.Stream` and
    `torch.Event` while emulated: calling one makes an emulated stream (event) for "cuda", torch's
    own for another device (`route`), and every stream (event) of any device is an instance.
    Their subclasses, the emulated Stream and Event, are ordinary classes."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        route = cls.__dict__.get("route")
        if route is not None:
            return route(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, instance: object) -> bool:
        torch_type = cls.__dict__.get("torch_type")
        return type.__instancecheck__(cls, instance) or (torch_type is not None and isinstance(instance, torch_type))

    def __subclasscheck__(cls, subclass: type) -> bool:
        torch_type = cls.__dict__.get("torch_type")
        return type.__subclasscheck__(cls, subclass) or (torch_type is not None and issubclass(subclass, torch_type))


class GenericStream(_TorchStream, metaclass=_DeviceGeneric):
    """`torch.Stream` while emulated, and the base of the emulated Stream (PyTorch's tests look for
    it in the MRO). `torch.Stream("cuda")` is one of these, not a torch.cuda.Stream, as on a CUDA
    build, with methods of its own (C there): a wrapper of torch.cuda.Stream's is not of these."""

    torch_type = _TorchStream

    @staticmethod
    def route(device: Any = None, *, priority: int = 0, **kwargs: Any) -> Any:
        if kwargs or not _names_cuda(device):
            return _TorchStream(device, priority=priority, **kwargs) if device is not None else _TorchStream(**kwargs)
        index = check_device(device)
        return _TorchStream.__new__(
            GenericStream, stream_id=_pool(index).take(priority), device_index=index, device_type=CUDA_TYPE
        )

    def query(self) -> bool:
        """False once after new work (see the module's policy), then True."""
        key = key_of(self)
        if pending(key):
            mark_done(key)
            return False
        return True

    def synchronize(self) -> None:
        key = key_of(self)
        forbid_during_capture(key)
        flush()
        with on_device(self.device_index):
            _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(self.stream_id)
        mark_done(key)

    # c10's Stream::wait(event) and record: no Python Event method runs (as in torch's C).
    def wait_event(self, event: GenericEvent) -> None:  # type: ignore[override]
        _block(event, self)

    def record_event(self, event: GenericEvent | None = None) -> GenericEvent:  # type: ignore[override]
        if event is None:
            event = GenericEvent.route("cuda")
        _record(event, self)
        return event

    def wait_stream(self, stream: GenericStream) -> None:  # type: ignore[override]
        _block(stream.record_event(), self)

    def is_capturing(self) -> bool:
        return key_of(self) in capturing

    def __enter__(self) -> GenericStream:
        current.enter_stream(key_of(self), self.device_index)
        return self

    def __exit__(self, *exc: object) -> None:
        current.exit_stream()


class Stream(GenericStream):
    """A pool stream of the emulated device (or a view of one, given `stream_id`).

    A `torch.Stream` subclass like the real one, so `Tensor.record_stream(s)` reaches the
    dispatcher with a c10 stream; `stream_id` and `cuda_stream` are the same small handle.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:
            handle = int(kwargs["stream_id"])
            index = check_device(kwargs.get("device_index"))
        else:
            index = check_device(device)
            handle = _pool(index).take(priority)
        return super().__new__(cls, stream_id=handle, device_index=index, device_type=CUDA_TYPE)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    @property
    def native_handle(self) -> int:
        return self.stream_id

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(lowest, highest) priority, as `cudaDeviceGetStreamPriorityRange` clamped by c10."""
        return 0, -(PRIORITY_LEVELS - 1)

    @property
    def priority(self) -> int:
        return -max(((self.stream_id & ((1 << _DEVICE_SHIFT) - 1)) >> _STREAM_TYPE_BITS) - 1, 0)

    # The emulated Stream takes and returns the emulated Event, as torch.cuda.Stream takes
    # torch.cuda.Event rather than the torch.Event its base class declares: [override].
    # GenericStream's behaviour under entries of its own (as torch.cuda.Stream's are not torch.Stream's).
    query = GenericStream.query
    synchronize = GenericStream.synchronize

    def wait_event(self, event: Event) -> None:  # type: ignore[override]
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:  # type: ignore[override]
        # As torch does it: an event recorded on `stream`, waited on here.
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:  # type: ignore[override]
        if event is None:
            event = Event()
        event.record(self)
        return event

    @property
    def _as_parameter_(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(self.stream_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and key_of(other) == key_of(self)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.stream_id:#x}>"

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.stream_id)


class GenericEvent(metaclass=_DeviceGeneric):
    """`torch.Event` while emulated, and the base of the emulated Event (not a torch._C.Event,
    whose constructor wants a real device). `torch.Event("cuda")` is one of these, not a
    torch.cuda.Event, as on a CUDA build. As in CUDA, the event handle is created lazily on the
    first `record()`; waiting on or synchronizing a never-recorded event does nothing."""

    torch_type = _TorchEvent

    @staticmethod
    def route(device: Any = None, **kwargs: Any) -> Any:
        if not _names_cuda(device):
            return _TorchEvent(device, **kwargs)
        return type.__call__(GenericEvent, **kwargs)

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._handle = 0
        self._device = 0
        self._generation = 0
        self._recorded_at = 0.0
        # (stream handle, its launch count) at the last record: what the event waits for.
        self._recorded_work = (DEFAULT_STREAM, 0)

    @property
    def event_id(self) -> int:
        return self._handle

    @property
    def device(self) -> torch.device | None:
        return torch.device("cuda", self._device) if self._handle else None

    def record(self, stream: GenericStream | None = None) -> None:
        _record(self, current_stream() if stream is None else stream)

    def wait(self, stream: GenericStream | None = None) -> None:
        _block(self, current_stream() if stream is None else stream)

    def query(self) -> bool:
        """False once for a record with pending work before it (the module's policy), then True."""
        stream, upto = self._recorded_work
        if pending(stream, upto):
            mark_done(stream, upto)
            return False
        return True

    def synchronize(self) -> None:
        if not self._handle:
            return
        if _captured_events.get(self._handle) is not None:
            forbid_during_capture()
        _gpu_trace.EventSynchronizationCallbacks.fire_callbacks(self._handle)
        mark_done(*self._recorded_work)

    def elapsed_time(self, end_event: Event) -> float:
        # c10's checks, in its order and with its ValueError
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._handle and end_event._handle):
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def ipc_handle(self) -> bytes:
        raise EmulationGap("interprocess events (`torch.cuda.Event.ipc_handle`)")

    @property
    def _as_parameter_(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(self._handle)

    def __del__(self) -> None:
        # An event of a device that is gone (deactivated since) dies silently.
        if self._handle and self._generation == _generation:
            _gpu_trace.EventDeletionCallbacks.fire_callbacks(self._handle)

    def __repr__(self) -> str:
        return f"torch.Event device_type=cuda, device_index={self._device}, event_flag=0, event_id={self._handle}"


class Event(GenericEvent):
    """`torch.cuda.Event`: GenericEvent's behaviour under entries of its own (torch.cuda.Event's
    methods are not torch.Event's: a wrapper of one does not reach the other's)."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> None:
        super().__init__(enable_timing, blocking, interprocess)
        self.external = external

    @property
    def cuda_event(self) -> int:
        return self._handle

    record = GenericEvent.record
    wait = GenericEvent.wait
    query = GenericEvent.query
    synchronize = GenericEvent.synchronize

    def __repr__(self) -> str:
        if self._handle:
            return f"<torch.cuda.Event {self._handle:#x}>"
        return "<torch.cuda.Event uninitialized>"


def _record(event: GenericEvent, stream: GenericStream) -> None:
    """c10's event record (under the stream's device): the handle made on the first one."""
    if deferred:
        flush()
    key = key_of(stream)
    with on_device(stream.device_index):
        if not event._handle:
            event._handle = next(_event_ids)
            event._device = stream.device_index
            event._generation = _generation
            _gpu_trace.EventCreationCallbacks.fire_callbacks(event._handle)
        event._recorded_at = time.perf_counter()
        event._recorded_work = (key, launched.get(key, 0))
        _gpu_trace.EventRecordCallbacks.fire_callbacks(event._handle, stream.stream_id)
    graph = capturing.get(key)
    if graph is not None:
        _captured_events[event._handle] = (graph, graph.snapshot(key))
    else:
        _captured_events.pop(event._handle, None)


def _block(event: GenericEvent, stream: GenericStream) -> None:
    """c10's event block (cudaStreamWaitEvent): nothing for a never-recorded event."""
    if not event._handle:
        return
    if deferred:
        flush()
    with on_device(stream.device_index):
        _gpu_trace.EventWaitCallbacks.fire_callbacks(event._handle, stream.stream_id)
    captured = _captured_events.get(event._handle)
    if captured is not None and captured[0].capturing:
        graph, snapshot = captured
        key = key_of(stream)
        graph.join(key, snapshot)
        capturing[key] = graph


# -- torch.cuda module functions -----------------------------------------------------------


def view(key: int) -> Stream:
    """The Stream object of the stream with engine id `key`."""
    stream = _views.get(key)
    if stream is None:
        handle = DEFAULT_STREAM if key < -1 else key
        stream = _views[key] = Stream(stream_id=handle, device_index=device_of(key), device_type=CUDA_TYPE)
    return stream


def current_stream(device: Any = None) -> Stream:
    if device is None:
        return view(current_handle())
    return view(current_key(check_device(device)))


def default_stream(device: Any = None) -> Stream:
    return view(stream_key(DEFAULT_STREAM, check_device(device)))


def synchronize(device: Any = None) -> None:
    index = check_device(device)
    forbid_during_capture()
    flush()
    with on_device(index):
        _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()
    mark_done(device=index)


def is_current_stream_capturing() -> bool:
    return current_handle() in capturing
