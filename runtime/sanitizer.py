"""The sanitizer: one tracker fed by the dispatch mode, the gpu_trace callbacks and a few
wrapped torch.cuda entry points that have no callback (graph capture, record_stream, queries,
host reads that bypass the dispatcher), on the real CUDA device or the emulated one."""

from __future__ import annotations

import threading
import traceback
import warnings
import weakref
from collections.abc import Callable
from typing import IO, Any

import torch

from csan_lint.runtime import eager_compile, torch_internals
from csan_lint.runtime.cuda_semantics import ACTIONS, UNRECORDED_EVENT, capture_is_lenient
from csan_lint.runtime.devices import CudaStreamFlags, DeviceStreams
from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.events import Access, RuntimeErrorReport
from csan_lint.runtime.gpu_trace import GpuTraceHooks
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.patches import Patches
from csan_lint.runtime.stacks import capture_stack
from csan_lint.runtime.tensor_bytes import storage_base
from csan_lint.runtime.tracker import Tracker

DEVICES = ("auto", "cuda", "emulated")

GRAPH_REPLAY_OPERATOR = "cuda_graph.replay"


class CsanInternalWarning(RuntimeWarning):
    """The sanitizer hit a bug of its own; checking stops, the user's program goes on."""


class CsanBlockingUnknownWarning(RuntimeWarning):
    """The sanitizer could not tell whether a stream made outside torch is blocking; it takes it
    as non-blocking (a race reported between it and the default stream may be false)."""


class CsanSkipWarning(RuntimeWarning):
    """Ops on a tensor type with no storage the sanitizer can see into are not checked (told
    once per type); checking goes on for everything else."""


def resolve_device(device: str) -> str:
    """ "cuda" or "emulated" for a requested device; "auto" means real CUDA when torch has it."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "auto":
        from csan_lint.runtime import emulation

        if emulation.is_active():
            return "emulated"
        return "cuda" if torch.cuda.is_available() else "emulated"
    if device == "cuda":
        from csan_lint.runtime import emulation

        if emulation.is_active() or not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' asked for, but torch sees no real CUDA device")
    return device


class Sanitizer:
    """Checks the CUDA stream usage of the code run while enabled.

    `errors` holds every report so far; `internal_errors` the sanitizer's own failures (each
    also a `CsanInternalWarning`; checking stops until `restart()`). `listeners` are called
    with each new report as soon as it is detected, and `internal_listeners` with each
    internal failure's message (the pytest plugin streams both to its report file).
    """

    def __init__(self, device: str = "auto", trace_out: IO[str] | None = None) -> None:
        self.requested_device = device
        self.device = ""
        self.trace_out = trace_out
        self.errors: list[RuntimeErrorReport] = []
        self.internal_errors: list[str] = []
        self.listeners: list[Callable[[RuntimeErrorReport], None]] = []
        self.internal_listeners: list[Callable[[str], None]] = []
        self.enabled = False
        self.broken = False
        self._paused = False
        self._activated_emulation = False
        self._lock = EngineLock()
        self._patches = Patches()
        self._graphs: weakref.WeakKeyDictionary[Any, list[Access]] = weakref.WeakKeyDictionary()
        self._writer: Any = None
        self._current_stream: Callable[[], int] = _current_stream
        # With several devices: engine ids of (device, stream handle), and the stream an op on
        # a tensor runs on; None on an emulated machine of one device.
        self._device_streams: DeviceStreams | None = None
        self._device_stream: Callable[[torch.Tensor], int] | None = None
        # Whether a stream an ExternalStream wraps synchronizes with the legacy default stream.
        self._is_blocking: Callable[[int], bool] = lambda handle: False
        # Ids of the code objects of a driver's call into user code (pytest's, runpy's): stack
        # walks stop there, which keeps capture cost independent of the driver's depth.
        self.stack_stop: set[int] = set()
        self.facts: Any = None
        """Facts from runs being recorded (runtime/facts_mode.py), kept across restarts."""
        self._new_tracker()

    # -- lifecycle ----------------------------------------------------------------------

    def _new_tracker(self) -> None:
        self.tracker = Tracker()
        self._seen_errors = 0
        sink: Any = self.tracker
        if self.trace_out is not None:
            from csan_lint.runtime.trace import TraceWriter

            writer = self._writer
            if writer is None:
                writer = self._writer = TraceWriter(self.tracker, self.trace_out)
            writer.tracker = self.tracker  # after a restart the trace goes on in the same file
            sink = writer
        self.sink = sink
        self.mode = SanitizerMode(
            sink,
            is_device=_is_cuda,
            is_pinned=_is_pinned,
            current_stream=self._current_stream,
            on_internal_error=self._internal_error,
            errors=self.tracker.errors,
            on_errors=self._collect,
            on_skipped=_warn_skipped,
            lock=self._lock,
            device_stream=self._device_stream,
        )
        self.hooks = GpuTraceHooks(
            sink,
            self.mode.pending,
            self._internal_error,
            current_stream=lambda: self._current_stream(),
            after=self._collect,
            lock=self._lock,
            stack=self.mode.stack_of_running_op,
            streams=self._device_streams,
        )
        self.mode.stack_stop = self.stack_stop
        self.mode.facts = self.facts

    def enable(self) -> Sanitizer:
        if self.enabled:
            return self
        from csan_lint.runtime import child_races

        child_races.stop_in_child()  # a child's own checker (a nested `pytest --csan`) takes over
        self.device = resolve_device(self.requested_device)
        torch_internals.check(real_cuda=self.device == "cuda")
        if self.device == "emulated":
            from csan_lint.runtime import emulation

            if not emulation.is_active():
                emulation.activate()
                self._activated_emulation = True
            # The emulation's own registries answer at once (no Tensor attribute lookups).
            self.mode.is_device = emulation.is_device
            self.mode.is_pinned = emulation.is_pinned
            self._current_stream = emulation.current_stream_handle
            self._is_blocking = emulation.is_blocking_stream
            if emulation.device_count() > 1:
                # Its handles are the engine's ids already; its trace callbacks name every
                # device's default stream 0, as a GPU's do.
                self._device_streams = DeviceStreams(torch.cuda.current_device, torch.cuda.device_count)
                self.hooks.streams = self._device_streams
                self._device_stream = emulation.tensor_stream
            else:
                self._device_streams = self.hooks.streams = self._device_stream = None
        else:
            self.mode.is_device, self.mode.is_pinned = _is_cuda, _is_pinned
            self._device_streams = DeviceStreams(torch.cuda.current_device, torch.cuda.device_count)
            self._current_stream, self._device_stream = _cuda_streams(self._device_streams)
            self.hooks.streams = self._device_streams
            self._is_blocking = CudaStreamFlags(torch.version.cuda).is_blocking
        self.mode.current_stream = self._current_stream
        self.mode.device_stream = self._device_stream
        self.hooks.register(real_cuda=self.device == "cuda")
        self._install_patches()
        self.mode.__enter__()
        self.enabled = True
        return self

    def disable(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        try:
            self._collect()  # the last reports, to the listeners
            if self.trace_out is not None:
                self._writer.flush()
        except Exception as exc:
            self._internal_error(exc)
        self.mode.__exit__(None, None, None)
        self._patches.restore()
        self.hooks.unregister()
        if self._activated_emulation:
            from csan_lint.runtime import emulation

            emulation.deactivate()
            self._activated_emulation = False

    def restart(self) -> None:
        """Fresh shadow state and checking back on (after an internal error left it unsure)."""
        was_enabled = self.enabled
        if was_enabled:
            self.mode.__exit__(None, None, None)
            self.hooks.unregister()
        is_device, is_pinned = self.mode.is_device, self.mode.is_pinned
        self._new_tracker()
        self.mode.is_device, self.mode.is_pinned = is_device, is_pinned
        self.broken = False
        self.mode.checking = not self._paused
        if was_enabled:
            self.hooks.register(real_cuda=self.device == "cuda")
            self.mode.__enter__()

    def __enter__(self) -> Sanitizer:
        return self.enable()

    def __exit__(self, *exc: object) -> None:
        self.disable()

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        """Ops run unchecked while paused (a test opted out); syncs and frees are still seen."""
        self._paused = value
        if not self.broken:
            self.mode.checking = not value

    # -- results ------------------------------------------------------------------------

    def _collect(self) -> None:
        """Move the tracker's new reports to `errors` and tell the listeners at once."""
        found = self.tracker.errors
        if len(found) == self._seen_errors:
            return
        new = found[self._seen_errors :]
        self._seen_errors = len(found)
        for report in new:
            self.errors.append(report)
            for listener in self.listeners:
                listener(report)

    def _internal_error(self, exc: BaseException) -> None:
        self.broken = True
        self.mode.checking = False
        self.hooks.active = False
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        message = f"{type(exc).__name__}: {exc}{place}"
        self.internal_errors.append(message)
        try:
            warnings.warn(
                f"csan: internal error, checking is off from here: {message}",
                CsanInternalWarning,
                stacklevel=2,
            )
        except Warning:
            pass  # warnings turned into errors (-W error) must not reach the user's code
        for listener in self.internal_listeners:
            try:
                listener(message)
            except Exception:
                pass  # nothing is left to tell; the user's program must go on

    def _guard(self, action: Callable[[], None], *, while_paused: bool = False) -> None:
        """Run one piece of bookkeeping; its failure becomes an internal error. `while_paused`:
        also while a test opted out (facts later tests need, like a stream's flags)."""
        if not self.mode.checking and not (while_paused and self._paused and not self.broken):
            return
        try:
            with self._lock:
                action()
            self._collect()
        except Exception as exc:
            self._internal_error(exc)

    # -- entry points with no trace callback ----------------------------------------------

    def _install_patches(self) -> None:
        patches = self._patches
        sanitizer = self

        def capture_begin(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                # capture_begin(pool=None, capture_error_mode="global")
                mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
                sanitizer._guard(lambda: sanitizer._capture_began(lenient=capture_is_lenient(mode)))
                try:
                    return original(graph, *args, **kwargs)
                except BaseException:
                    sanitizer.mode.capture = None
                    raise

            return wrapper

        def capture_end(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                sanitizer._guard(lambda: sanitizer._capture_ended(graph))
                return original(graph, *args, **kwargs)

            return wrapper

        def replay(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                mode = sanitizer.mode
                # The emulated device re-runs the captured ops: they are one graph launch here.
                checking, mode.checking = mode.checking, False
                try:
                    result = original(graph, *args, **kwargs)
                finally:
                    mode.checking = checking
                sanitizer._guard(lambda: sanitizer._replayed(graph))
                return result

            return wrapper

        def record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(tensor: torch.Tensor, stream: Any) -> Any:
                sanitizer._guard(
                    lambda: sanitizer.sink.stream_recorded(storage_base(tensor), sanitizer._stream_key(stream))
                )
                return original(tensor, stream)

            return wrapper

        nested = threading.local()

        def outermost(make: Callable[[Any], Callable[..., Any]]) -> Callable[[Any], Callable[..., Any]]:
            # Where torch.cuda.Event/Stream subclass torch.Event/Stream, a torch.cuda method may
            # reach the wrapped torch one through super(): the action is reported once.
            def make_outermost(original: Callable[..., Any]) -> Callable[..., Any]:
                wrapped = make(original)

                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    if getattr(nested, "active", False):
                        return original(*args, **kwargs)
                    nested.active = True
                    try:
                        return wrapped(*args, **kwargs)
                    finally:
                        nested.active = False

                return wrapper

            return make_outermost

        def stream_query(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(stream: Any) -> bool:
                done = original(stream)
                sanitizer._guard(lambda: sanitizer.sink.stream_queried(sanitizer._stream_key(stream), bool(done)))
                return done

            return wrapper

        def event_query(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(event: Any) -> bool:
                done = original(event)
                sanitizer._guard(lambda: sanitizer.sink.event_queried(_event_handle(event), bool(done)))
                return done

            return wrapper

        def event_wait(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(event: Any, stream: Any = None) -> Any:
                sanitizer._guard(lambda: sanitizer._event_waited(event, stream))
                return original(event, stream)

            return wrapper

        def stream_wait_event(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(stream: Any, event: Any) -> Any:
                sanitizer._guard(lambda: sanitizer._event_waited(event, stream))
                return original(stream, event)

            return wrapper

        def external_stream(original: Callable[..., Any]) -> Callable[..., Any]:
            # ExternalStream.__new__ and get_stream_from_external: a stream made outside torch's
            # pool, maybe with default flags (blocking), which no creation callback announced.
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                stream = original(*args, **kwargs)
                sanitizer._guard(lambda: sanitizer._external_stream(stream), while_paused=True)
                return stream

            return wrapper

        def stream_new(original: Callable[..., Any]) -> Callable[..., Any]:
            # Stream(): a pool stream handed out here. The creation callbacks fire for the whole
            # pool at its first use, so this is where the user made it: reports name it so.
            def wrapper(cls: Any, *args: Any, **kwargs: Any) -> Any:
                stream = original(cls, *args, **kwargs)
                if "stream_id" not in kwargs and "stream_ptr" not in kwargs:  # not a view of a known one
                    sanitizer._guard(lambda: sanitizer._stream_made(stream), while_paused=True)
                return stream

            return wrapper

        def host_read(operator: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def make(original: Callable[..., Any]) -> Callable[..., Any]:
                def wrapper(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                    sanitizer.mode.host_read(tensor, operator)
                    return original(tensor, *args, **kwargs)

                return wrapper

            return make

        def thread_bootstrap(original: Callable[..., Any]) -> Callable[..., Any]:
            # Dispatch modes are per thread: a new thread's work is checked by entering the
            # mode around its run() (a subclass's override included), inside whatever the
            # thread's bootstrap sets up first (the emulated device's mode, which must sit
            # below ours as it does on the main thread).
            def wrapper(thread: threading.Thread) -> None:
                run = thread.run

                def checked_run() -> None:
                    if not sanitizer.enabled:
                        return run()
                    with sanitizer.mode:
                        return run()

                thread.run = checked_run  # type: ignore[method-assign]
                try:
                    original(thread)
                finally:
                    if thread.__dict__.get("run") is checked_run:
                        del thread.run

            return wrapper

        graph_class = torch.cuda.CUDAGraph
        patches.wrap(graph_class, "capture_begin", capture_begin)
        patches.wrap(graph_class, "capture_end", capture_end)
        patches.wrap(graph_class, "replay", replay)
        # The actions no trace callback announces, on every class cuda_semantics names for them.
        untraced = {
            "record_stream": record_stream,
            "stream query": stream_query,
            "event query": event_query,
            "event wait (never recorded)": event_wait,
            "external stream": external_stream,
        }
        for action, make in untraced.items():
            for owner, method in ACTIONS[action].methods:
                patches.wrap(
                    _torch_object(owner), method, outermost(stream_wait_event if method == "wait_event" else make)
                )
        patches.wrap(torch.cuda.Stream, "__new__", stream_new)  # where the user made it, for reports
        patches.wrap(torch.Tensor, "tolist", host_read("aten::tolist"))
        patches.wrap(torch.Tensor, "numpy", host_read("aten::numpy"))
        patches.wrap(threading.Thread, "_bootstrap_inner", thread_bootstrap)
        eager_compile.run_eagerly(patches)  # compiled code's ops are checked like eager ones

    # Each runs under `_guard`; their stacks start in our frames, which reports hide.

    def _capture_began(self, lenient: bool) -> None:
        stack = capture_stack(stop=self.stack_stop)
        self.sink.capture_began(self._current_stream(), stack=stack, lenient=lenient)
        self.mode.capture = []
        self.mode.capture_thread = threading.get_ident()

    def _capture_ended(self, graph: Any) -> None:
        self.sink.capture_ended(self._current_stream(), stack=capture_stack(stop=self.stack_stop))
        accesses, self.mode.capture = self.mode.capture, None
        if accesses is not None:
            # One access per extent, a write if any captured kernel wrote it.
            merged: dict[tuple[int, int], Access] = {}
            for access in accesses:
                key = (access.ptr, access.size)
                known = merged.get(key)
                if known is None or (access.is_write and not known.is_write):
                    merged[key] = access
            self._graphs[graph] = list(merged.values())

    def _replayed(self, graph: Any) -> None:
        accesses = self._graphs.get(graph)
        if accesses:
            stack = capture_stack(stop=self.stack_stop)
            self.sink.kernel_launched(self._current_stream(), GRAPH_REPLAY_OPERATOR, accesses, stack=stack)

    def _stream_key(self, stream: Any) -> int:
        """The engine's id of a stream object (per device on a real GPU)."""
        handle = _stream_handle(stream)
        if self._device_streams is None:
            return handle
        return self._device_streams.key(handle, stream.device_index)

    def _stream_made(self, stream: Any) -> None:
        """A pool stream (never blocking) and where it was made."""
        self.sink.stream_created(self._stream_key(stream), stack=capture_stack(stop=self.stack_stop))

    def _external_stream(self, stream: Any) -> None:
        handle = _stream_handle(stream)
        try:
            blocking = self._is_blocking(handle)
        except RuntimeError as exc:
            blocking = False
            _warn(
                f"csan: cannot tell whether stream {handle:#x} is blocking ({exc}): taken as "
                "non-blocking, so a race reported between it and the default stream may be false",
                CsanBlockingUnknownWarning,
            )
        if self._device_streams is None or not blocking:
            self.sink.stream_created(self._stream_key(stream), blocking=blocking)
            return
        # It synchronizes with its own device's legacy default stream (one per device).
        default = self._device_streams.key(0, stream.device_index)
        self.sink.stream_created(self._stream_key(stream), blocking=True, default_stream=default)

    def _event_waited(self, event: Any, stream: Any) -> None:
        if not _event_handle(event):
            # CUDA fires no trace for a wait on a never-recorded event: it orders nothing.
            handle = self._current_stream() if stream is None else self._stream_key(stream)
            stack = capture_stack(stop=self.stack_stop)
            self.sink.event_waited(UNRECORDED_EVENT, handle, stack=stack)


def _warn(message: str, category: type[Warning]) -> None:
    try:
        warnings.warn(message, category, stacklevel=3)
    except Warning:
        pass  # warnings turned into errors (-W error) must not reach the user's code


def _warn_skipped(type_name: str) -> None:
    _warn(
        f"csan: {type_name} tensors have no storage the sanitizer can see into: ops on them "
        "are not checked (every other op still is)",
        CsanSkipWarning,
    )


def _is_cuda(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda


def _is_pinned(tensor: torch.Tensor) -> bool:
    return tensor.is_pinned()


def _current_stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def _cuda_streams(keys: DeviceStreams) -> tuple[Callable[[], int], Callable[[torch.Tensor], int]]:
    """On a real GPU: the current stream's engine id, and the stream an op on a tensor runs on
    (its device's current stream), without building a Stream object per op (the raw call
    inductor's generated code makes); the public API where torch lacks it."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    if raw is None or get_device is None:
        raw = lambda device: torch.cuda.current_stream(device).cuda_stream  # noqa: E731
        get_device = torch.cuda.current_device

    def current() -> int:
        device = get_device()
        return keys.key(raw(device), device)

    def of_tensor(tensor: torch.Tensor) -> int:
        device = tensor.get_device()
        return keys.key(raw(device), device)

    return current, of_tensor


def _torch_object(path: str) -> Any:
    """The object a dotted `torch.` path names (as cuda_semantics spells them)."""
    found: Any = torch
    for name in path.split(".")[1:]:
        found = getattr(found, name)
    return found


def _event_handle(event: Any) -> int:
    """The CUDA event a torch.cuda.Event (`cuda_event`) or torch.Event (`event_id`) holds: 0
    until its first record, as the trace callbacks name it after."""
    handle = getattr(event, "cuda_event", None)
    return event.event_id if handle is None else handle


def _stream_handle(stream: Any) -> int:
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:  # a generic torch.Stream, as aten::record_stream receives it
        handle = torch.cuda.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
        ).cuda_stream
    return handle
