"""The sanitizer: one tracker fed by the dispatch mode, the gpu_trace callbacks and a few
wrapped torch.cuda entry points that have no callback (graph capture, record_stream, queries,
host reads that bypass the dispatcher: entry_points.py), on the real CUDA device or the
emulated one."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import IO, Any

import torch

from csan_lint.runtime import eager_compile, torch_internals

# The warning categories users filter on, importable from here.
from csan_lint.runtime.csan_warnings import CsanBlockingUnknownWarning as CsanBlockingUnknownWarning
from csan_lint.runtime.csan_warnings import CsanInternalWarning, CsanSkipWarning, warn
from csan_lint.runtime.devices import CudaStreamFlags, DeviceStreams
from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.entry_points import UntracedEntryPoints
from csan_lint.runtime.events import RuntimeErrorReport
from csan_lint.runtime.gpu_trace import GpuTraceHooks
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.patches import Patches
from csan_lint.runtime.tracker import Tracker

DEVICES = ("auto", "cuda", "emulated")


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
        self._entry_points = UntracedEntryPoints(self)
        self._writer: Any = None
        self.current_stream: Callable[[], int] = _current_stream
        # With several devices: engine ids of (device, stream handle), and the stream an op on
        # a tensor runs on; None on an emulated machine of one device.
        self.device_streams: DeviceStreams | None = None
        self._device_stream: Callable[[torch.Tensor], int] | None = None
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
            current_stream=self.current_stream,
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
            current_stream=lambda: self.current_stream(),
            after=self._collect,
            lock=self._lock,
            stack=self.mode.stack_of_running_op,
            streams=self.device_streams,
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
            self.current_stream = emulation.current_stream_handle
            self._entry_points.is_blocking = emulation.is_blocking_stream
            if emulation.device_count() > 1:
                # Its handles are the engine's ids already; its trace callbacks name every
                # device's default stream 0, as a GPU's do.
                self.device_streams = DeviceStreams(torch.cuda.current_device, torch.cuda.device_count)
                self.hooks.streams = self.device_streams
                self._device_stream = emulation.tensor_stream
            else:
                self.device_streams = self.hooks.streams = self._device_stream = None
        else:
            self.mode.is_device, self.mode.is_pinned = _is_cuda, _is_pinned
            self.device_streams = DeviceStreams(torch.cuda.current_device, torch.cuda.device_count)
            self.current_stream, self._device_stream = _cuda_streams(self.device_streams)
            self.hooks.streams = self.device_streams
            self._entry_points.is_blocking = CudaStreamFlags(torch.version.cuda).is_blocking
        self.mode.current_stream = self.current_stream
        self.mode.device_stream = self._device_stream
        self.hooks.register(real_cuda=self.device == "cuda")
        self._entry_points.install(self._patches)
        eager_compile.run_eagerly(self._patches)  # compiled code's ops are checked like eager ones
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
        warn(f"csan: internal error, checking is off from here: {message}", CsanInternalWarning, stacklevel=2)
        for listener in self.internal_listeners:
            try:
                listener(message)
            except Exception:
                pass  # nothing is left to tell; the user's program must go on

    def guard(self, action: Callable[[], None], *, while_paused: bool = False) -> None:
        """Run one piece of a wrapped entry point's bookkeeping; its failure becomes an internal
        error. `while_paused`: also while a test opted out (facts later tests need, like a
        stream's flags)."""
        if not self.mode.checking and not (while_paused and self._paused and not self.broken):
            return
        try:
            with self._lock:
                action()
            self._collect()
        except Exception as exc:
            self._internal_error(exc)


def _warn_skipped(type_name: str) -> None:
    warn(
        f"csan: {type_name} tensors have no storage the sanitizer can see into: ops on them "
        "are not checked (every other op still is)",
        CsanSkipWarning,
        stacklevel=2,
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
