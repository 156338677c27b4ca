"""The emulated device's streams, events and synchronization: the `torch.cuda` API that GPU
test code calls, firing the `torch.cuda._gpu_trace` callbacks the CUDA build fires, with the
same arguments at the same moments, so a sanitizer sees the same event sequence on CPU.

All work runs at once on the CPU; what matters is the order of the events, not timing.
Queries follow a pending-once policy, so that a program that ignores a query's answer, or
takes its "not done" branch, is still checked: `Stream.query()` answers False once after new
work was launched on the stream (the host cannot know it finished), and True when asked again
with no new work, or after a sync; `Event.query()` answers False once for a record made while
its stream had such work, then True. A polling loop ends on its second query, and only a True
answer orders the host after the work (the sanitizer treats it like a sync). One device
(`cuda:0`).

Streams made by `cudart().cudaStreamCreate` (default flags) are blocking: they synchronize with
the legacy default stream (handle 0). `is_blocking` tells the sanitizer, which asks when an
`ExternalStream` wraps one, as it asks the CUDA runtime on a GPU.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime.cuda_semantics import CAPTURE_FORBIDDEN
from csan_lint.runtime.emulation.gaps import EmulationGap

DEVICE_COUNT = 1
DEFAULT_STREAM = 0
# c10's pool: 32 streams per priority level, handed out round-robin, for at most 4 levels
# (a modern GPU's priority range is wider and gets clamped to that).
STREAMS_PER_POOL = 32
PRIORITY_LEVELS = 4
_STREAM_TYPE_BITS = 5  # a pool stream's handle: (priority level + 1) << 5 | slot
RAW_STREAM_BASE = 1 << 20  # handles of streams made outside the pool, above every pool handle
CUDA_TYPE = 1  # c10::DeviceType::CUDA


class _Pool:
    """Which pool slot the next `Stream()` of each priority gets, and whether the pool exists."""

    def __init__(self) -> None:
        self.created = False
        self.counters = [0] * PRIORITY_LEVELS
        self.lock = threading.Lock()

    def take(self, priority: int) -> int:
        with self.lock:
            if not self.created:
                # c10 creates the whole pool on the first request (slot-major), firing one
                # stream-creation callback per stream.
                self.created = True
                for slot in range(STREAMS_PER_POOL):
                    for level in range(PRIORITY_LEVELS):
                        _gpu_trace.StreamCreationCallbacks.fire_callbacks(_handle(level, slot))
            level = min(max(-int(priority), 0), PRIORITY_LEVELS - 1)
            slot = self.counters[level] % STREAMS_PER_POOL
            self.counters[level] += 1
        return _handle(level, slot)


def _handle(level: int, slot: int) -> int:
    return ((level + 1) << _STREAM_TYPE_BITS) | slot


_pool = _Pool()
# .stream: this thread's current stream handle; .previous: the ones `with stream:` replaced
_local = threading.local()
# One Stream object per handle for current_stream()/default_stream(): a sanitizer asks per op.
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
# Handles of the blocking streams made outside the pool (never reused, like event handles).
_blocking: set[int] = set()
_raw_stream_ids = itertools.count(RAW_STREAM_BASE)


def reset() -> None:
    """Fresh device state: no pool yet, every thread back on the default stream."""
    global _pool, _local, _generation
    _pool = _Pool()
    _local = threading.local()
    _generation += 1
    _views.clear()
    capturing.clear()
    _captured_events.clear()
    launched.clear()
    _known_done.clear()
    _blocking.clear()


def create_blocking_stream() -> int:
    """A new stream with CUDA's default flags (`cudaStreamCreate`): its handle."""
    handle = next(_raw_stream_ids)
    _blocking.add(handle)
    return handle


def destroy_stream(handle: int) -> bool:
    """`cudaStreamDestroy`: whether `handle` was a stream made by `create_blocking_stream`."""
    if handle not in _blocking:
        return False
    _blocking.discard(handle)
    return True


def is_blocking(handle: int) -> bool:
    """Whether stream `handle` synchronizes with the legacy default stream."""
    return handle in _blocking


def current_handle() -> int:
    """The calling thread's current stream handle (hot path: no Stream object)."""
    return getattr(_local, "stream", DEFAULT_STREAM)


def select(handle: int) -> None:
    """Make `handle` the calling thread's current stream."""
    _local.stream = handle


def note_launch(handle: int) -> None:
    """Work was launched on stream `handle` (pending until a sync or a True query)."""
    launched[handle] = launched.get(handle, 0) + 1


def mark_done(handle: int | None = None, upto: int | None = None) -> None:
    """The host knows the stream's work (up to launch count `upto`; all streams when `handle`
    is None) is done."""
    for stream in launched if handle is None else (handle,):
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


def check_device(device: Any) -> int:
    """The device index `device` names (None: the current one); an invalid one raises as CUDA."""
    if device is None:
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = 0 if device.index is None else device.index
    else:
        index = int(device)
    if index < 0:
        return 0
    if index >= DEVICE_COUNT:
        raise RuntimeError("CUDA error: invalid device ordinal")
    return index


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
        check_device(device)
        return _TorchStream.__new__(
            GenericStream, stream_id=_pool.take(priority), device_index=0, device_type=CUDA_TYPE
        )

    def query(self) -> bool:
        """False once after new work (see the module's policy), then True."""
        if pending(self.stream_id):
            mark_done(self.stream_id)
            return False
        return True

    def synchronize(self) -> None:
        forbid_during_capture(self.stream_id)
        _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(self.stream_id)
        mark_done(self.stream_id)

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
        return self.stream_id in capturing

    def __enter__(self) -> GenericStream:
        previous = getattr(_local, "previous", None)
        if previous is None:
            previous = _local.previous = []
        previous.append(current_handle())
        _local.stream = self.stream_id
        return self

    def __exit__(self, *exc: object) -> None:
        _local.stream = _local.previous.pop()


class Stream(GenericStream):
    """A pool stream of the emulated device (or a view of one, given `stream_id`).

    A `torch.Stream` subclass like the real one, so `Tensor.record_stream(s)` reaches the
    dispatcher with a c10 stream; `stream_id` and `cuda_stream` are the same small handle.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:
            handle = int(kwargs["stream_id"])
            check_device(kwargs.get("device_index"))
        else:
            check_device(device)
            handle = _pool.take(priority)
        return super().__new__(cls, stream_id=handle, device_index=0, device_type=CUDA_TYPE)

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
        return -max((self.stream_id >> _STREAM_TYPE_BITS) - 1, 0)

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
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id:#x}>"

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
        self._generation = 0
        self._recorded_at = 0.0
        # (stream handle, its launch count) at the last record: what the event waits for.
        self._recorded_work = (DEFAULT_STREAM, 0)

    @property
    def event_id(self) -> int:
        return self._handle

    @property
    def device(self) -> torch.device | None:
        return torch.device("cuda", 0) if self._handle else None

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
        return f"torch.Event device_type=cuda, device_index=0, event_flag=0, event_id={self._handle}"


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
    """c10's event record: the handle made on the first one."""
    if not event._handle:
        event._handle = next(_event_ids)
        event._generation = _generation
        _gpu_trace.EventCreationCallbacks.fire_callbacks(event._handle)
    event._recorded_at = time.perf_counter()
    event._recorded_work = (stream.stream_id, launched.get(stream.stream_id, 0))
    _gpu_trace.EventRecordCallbacks.fire_callbacks(event._handle, stream.stream_id)
    graph = capturing.get(stream.stream_id)
    if graph is not None:
        _captured_events[event._handle] = (graph, graph.snapshot(stream.stream_id))
    else:
        _captured_events.pop(event._handle, None)


def _block(event: GenericEvent, stream: GenericStream) -> None:
    """c10's event block (cudaStreamWaitEvent): nothing for a never-recorded event."""
    if not event._handle:
        return
    _gpu_trace.EventWaitCallbacks.fire_callbacks(event._handle, stream.stream_id)
    captured = _captured_events.get(event._handle)
    if captured is not None and captured[0].capturing:
        graph, snapshot = captured
        graph.join(stream.stream_id, snapshot)
        capturing[stream.stream_id] = graph


# -- torch.cuda module functions -----------------------------------------------------------


def _view(handle: int) -> Stream:
    stream = _views.get(handle)
    if stream is None:
        stream = _views[handle] = Stream(stream_id=handle, device_index=0, device_type=CUDA_TYPE)
    return stream


def current_stream(device: Any = None) -> Stream:
    if device is not None:
        check_device(device)
    return _view(current_handle())


def default_stream(device: Any = None) -> Stream:
    if device is not None:
        check_device(device)
    return _view(DEFAULT_STREAM)


def set_stream(stream: Stream | None) -> None:
    if stream is None:
        return
    _local.stream = stream.stream_id


def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
    check_device(device_index)
    _local.stream = stream_id


def synchronize(device: Any = None) -> None:
    check_device(device)
    forbid_during_capture()
    _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()
    mark_done()


def is_current_stream_capturing() -> bool:
    return current_handle() in capturing


def is_available() -> bool:
    return True


def device_count() -> int:
    return DEVICE_COUNT


def current_device() -> int:
    return 0


def set_device(device: Any) -> None:
    check_device(device)


def exchange_device(device: int) -> int:
    """`torch.cuda._exchange_device`: select `device`, answer the previous one (-1: none)."""
    if device < 0:
        return -1
    check_device(device)
    return 0


class DeviceProperties:
    """What `get_device_properties` answers: a plausible modern GPU."""

    name = "csan-lint emulated CUDA device"
    major = 9
    minor = 0
    total_memory = 80 * 2**30
    multi_processor_count = 132
    is_integrated = False
    is_multi_gpu_board = False
    warp_size = 32

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor})"


def get_device_properties(device: Any = None) -> DeviceProperties:
    check_device(device)
    return DeviceProperties()


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    properties = get_device_properties(device)
    return properties.major, properties.minor


class Nvtx:
    """NVTX ranges and marks: annotations for a profiler, nothing to do here (the CPU
    build's stub raises instead)."""

    def __getattr__(self, name: str) -> Callable[..., int]:
        return returns(0)


def no_op(*args: Any, **kwargs: Any) -> None:
    """For the calls that have nothing to do on an emulated device (`empty_cache`, `init`)."""


def returns(value: Any) -> Callable[..., Any]:
    def answer(*args: Any, **kwargs: Any) -> Any:
        return value

    return answer
