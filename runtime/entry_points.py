"""The torch entry points no trace callback announces, wrapped to tell the sanitizer's engine:
CUDA graph capture and replay, `record_stream`, stream and event queries, waits on events never
recorded, streams made by the user or outside torch's pool (cuda_semantics.py names each
action's classes and methods), host reads that bypass the dispatcher, and new threads, which
run under the dispatch mode. Apart from the sanitizer (sanitizer.py), which owns their
lifecycle: each action runs under its `guard` and reaches the engine through its current
`sink` and `mode`, which a restart replaces."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from csan_lint.runtime.csan_warnings import CsanBlockingUnknownWarning, warn
from csan_lint.runtime.cuda_semantics import ACTIONS, UNRECORDED_EVENT, capture_is_lenient
from csan_lint.runtime.events import Access
from csan_lint.runtime.patches import Patches
from csan_lint.runtime.stacks import capture_stack
from csan_lint.runtime.tensor_bytes import storage_base

if TYPE_CHECKING:
    from csan_lint.runtime.sanitizer import Sanitizer

GRAPH_REPLAY_OPERATOR = "cuda_graph.replay"


class UntracedEntryPoints:
    """The wrappers of one sanitizer. What they keep outlives its restarts: each CUDA graph's
    captured accesses, launched at its replay, and `is_blocking(handle)`, whether a stream an
    ExternalStream wraps synchronizes with the legacy default stream (the sanitizer picks it
    for the device in use)."""

    def __init__(self, sanitizer: Sanitizer) -> None:
        self.sanitizer = sanitizer
        self.is_blocking: Callable[[int], bool] = lambda handle: False
        self._graphs: weakref.WeakKeyDictionary[Any, list[Access]] = weakref.WeakKeyDictionary()

    def install(self, patches: Patches) -> None:
        """Wrap them, for as long as `patches` stand."""
        sanitizer = self.sanitizer

        def capture_begin(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                # capture_begin(pool=None, capture_error_mode="global")
                mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
                sanitizer.guard(lambda: self._capture_began(lenient=capture_is_lenient(mode)))
                try:
                    return original(graph, *args, **kwargs)
                except BaseException:
                    sanitizer.mode.capture = None
                    raise

            return wrapper

        def capture_end(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                sanitizer.guard(lambda: self._capture_ended(graph))
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
                sanitizer.guard(lambda: self._replayed(graph))
                return result

            return wrapper

        def record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(tensor: torch.Tensor, stream: Any) -> Any:
                sanitizer.guard(lambda: sanitizer.sink.stream_recorded(storage_base(tensor), self._stream_key(stream)))
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
                sanitizer.guard(lambda: sanitizer.sink.stream_queried(self._stream_key(stream), bool(done)))
                return done

            return wrapper

        def event_query(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(event: Any) -> bool:
                done = original(event)
                sanitizer.guard(lambda: sanitizer.sink.event_queried(_event_handle(event), bool(done)))
                return done

            return wrapper

        def event_wait(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(event: Any, stream: Any = None) -> Any:
                sanitizer.guard(lambda: self._event_waited(event, stream))
                return original(event, stream)

            return wrapper

        def stream_wait_event(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(stream: Any, event: Any) -> Any:
                sanitizer.guard(lambda: self._event_waited(event, stream))
                return original(stream, event)

            return wrapper

        def external_stream(original: Callable[..., Any]) -> Callable[..., Any]:
            # ExternalStream.__new__ and get_stream_from_external: a stream made outside torch's
            # pool, maybe with default flags (blocking), which no creation callback announced.
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                stream = original(*args, **kwargs)
                sanitizer.guard(lambda: self._external_stream(stream), while_paused=True)
                return stream

            return wrapper

        def stream_new(original: Callable[..., Any]) -> Callable[..., Any]:
            # Stream(): a pool stream handed out here. The creation callbacks fire for the whole
            # pool at its first use, so this is where the user made it: reports name it so.
            def wrapper(cls: Any, *args: Any, **kwargs: Any) -> Any:
                stream = original(cls, *args, **kwargs)
                if "stream_id" not in kwargs and "stream_ptr" not in kwargs:  # not a view of a known one
                    sanitizer.guard(lambda: self._stream_made(stream), while_paused=True)
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

    # Each runs under the sanitizer's `guard`; their stacks start in our frames, which reports hide.

    def _capture_began(self, lenient: bool) -> None:
        sanitizer = self.sanitizer
        stack = capture_stack(stop=sanitizer.stack_stop)
        sanitizer.sink.capture_began(sanitizer.current_stream(), stack=stack, lenient=lenient)
        sanitizer.mode.capture = []
        sanitizer.mode.capture_thread = threading.get_ident()

    def _capture_ended(self, graph: Any) -> None:
        sanitizer = self.sanitizer
        sanitizer.sink.capture_ended(sanitizer.current_stream(), stack=capture_stack(stop=sanitizer.stack_stop))
        accesses, sanitizer.mode.capture = sanitizer.mode.capture, None
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
            sanitizer = self.sanitizer
            stack = capture_stack(stop=sanitizer.stack_stop)
            sanitizer.sink.kernel_launched(sanitizer.current_stream(), GRAPH_REPLAY_OPERATOR, accesses, stack=stack)

    def _stream_key(self, stream: Any) -> int:
        """The engine's id of a stream object (per device on a real GPU)."""
        handle = _stream_handle(stream)
        device_streams = self.sanitizer.device_streams
        if device_streams is None:
            return handle
        return device_streams.key(handle, stream.device_index)

    def _stream_made(self, stream: Any) -> None:
        """A pool stream (never blocking) and where it was made."""
        stack = capture_stack(stop=self.sanitizer.stack_stop)
        self.sanitizer.sink.stream_created(self._stream_key(stream), stack=stack)

    def _external_stream(self, stream: Any) -> None:
        handle = _stream_handle(stream)
        try:
            blocking = self.is_blocking(handle)
        except RuntimeError as exc:
            blocking = False
            warn(
                f"csan: cannot tell whether stream {handle:#x} is blocking ({exc}): taken as "
                "non-blocking, so a race reported between it and the default stream may be false",
                CsanBlockingUnknownWarning,
                stacklevel=2,
            )
        sink, device_streams = self.sanitizer.sink, self.sanitizer.device_streams
        if device_streams is None or not blocking:
            sink.stream_created(self._stream_key(stream), blocking=blocking)
            return
        # It synchronizes with its own device's legacy default stream (one per device).
        default = device_streams.key(0, stream.device_index)
        sink.stream_created(self._stream_key(stream), blocking=True, default_stream=default)

    def _event_waited(self, event: Any, stream: Any) -> None:
        if not _event_handle(event):
            # CUDA fires no trace for a wait on a never-recorded event: it orders nothing.
            sanitizer = self.sanitizer
            handle = sanitizer.current_stream() if stream is None else self._stream_key(stream)
            stack = capture_stack(stop=sanitizer.stack_stop)
            sanitizer.sink.event_waited(UNRECORDED_EVENT, handle, stack=stack)


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
