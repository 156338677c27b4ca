"""The torch-facing side of facts from runs (runtime/facts_recorder.py keeps them): the dispatch
mode hands each operation's calling frame here before the operation reaches the engine, and a
copy's direction; `torch.cuda.set_stream` (which `with torch.cuda.stream(s):` calls) and a
stream's own `__enter__` (`with s:`) are wrapped so that a function that switches streams
before its first operation is seen entered on the stream current before the switch. Off unless
asked for (`record_facts`): it reads each recorded frame's locals, which ordinary checking never
does.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from csan_lint.runtime.facts_recorder import FactsRecorder
from csan_lint.runtime.report import stream_name


class FactsHook:
    """What `SanitizerMode.facts` calls; a failure here is the sanitizer's internal error
    (reported, and recording stops), never the user's."""

    def __init__(self, sanitizer: Any, recorder: FactsRecorder) -> None:
        self.sanitizer = sanitizer
        self.recorder = recorder
        self.broken = False
        self._local = threading.local()

    def before_op(self, frame: FrameType | None) -> None:
        """An operation called from `frame`, before the engine sees it."""
        self._local.frame = frame
        self._entered(frame)

    def copied(self, to_host: bool, non_blocking: bool) -> None:
        """The running operation copies between the host and the device."""
        if not self.broken:
            self._guarded(lambda: self.recorder.copied(getattr(self._local, "frame", None), to_host, non_blocking))

    def switching(self, frame: FrameType | None) -> None:
        """The current stream is about to change, from `frame`'s code."""
        self._entered(frame)

    def _entered(self, frame: FrameType | None) -> None:
        if self.broken or not self.sanitizer.mode.checking:
            return
        mode = self.sanitizer.mode

        def enter() -> None:
            with mode.lock:
                self.recorder.entered(frame, mode.current_stream(), self._describe)

        self._guarded(enter)

    def _describe(self, value: Any) -> list[tuple[str, str, int]]:
        """The tensor argument, and a leaf's gradient (`p.grad`: what hooks and optimizers are
        handed a parameter for); a non-leaf's `.grad` is not read (torch warns)."""
        if not self._plain(value):
            return []
        found = [("", *self._where(value))]
        if value.is_leaf and value.requires_grad and self._plain(value.grad):
            found.append(("grad", *self._where(value.grad)))
        return found

    @staticmethod
    def _plain(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_meta

    def _where(self, tensor: torch.Tensor) -> tuple[str, int]:
        mode = self.sanitizer.mode
        if mode.is_device(tensor):
            return "cuda", tensor.data_ptr()
        return ("pinned" if mode.is_pinned(tensor) else "cpu"), tensor.data_ptr()

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:  # a sanitizer bug must not break the user's program
            self.broken = True
            self.sanitizer._internal_error(exc)


def record_facts(sanitizer: Any) -> FactsRecorder:
    """Starts recording facts on an enabled sanitizer; they are kept until it is disabled."""
    recorder = FactsRecorder(
        lambda: sanitizer.tracker,
        lambda stream: stream_name(stream, sanitizer.tracker.stream_sites),
        sanitizer.stack_stop,
    )
    hook = FactsHook(sanitizer, recorder)
    sanitizer.facts = sanitizer.mode.facts = hook

    def set_stream(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hook.switching(sys._getframe(1))
            return original(*args, **kwargs)

        return wrapper

    def enter(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            hook.switching(sys._getframe(1))
            return original(self)

        return wrapper

    sanitizer._patches.wrap(torch.cuda, "set_stream", set_stream)
    for stream_class in _stream_classes():
        sanitizer._patches.wrap(stream_class, "__enter__", enter)
    return recorder


def _stream_classes() -> list[type]:
    """The stream classes whose `with stream:` switches streams without `torch.cuda.set_stream`
    (torch >= 2.7 enters a stream object in C): `torch.cuda.Stream`, and `torch.Stream` where it
    is a Python class (the emulated device's). torch's own `torch.Stream` is a C type that cannot
    be patched: on a real GPU, a function entering `torch.Stream("cuda")` first is seen at its
    first operation, on that stream."""
    classes = dict.fromkeys((torch.cuda.Stream, torch.Stream))
    return [cls for cls in classes if cls.__flags__ & _HEAP_TYPE]


_HEAP_TYPE = 1 << 9
"""Py_TPFLAGS_HEAPTYPE: a class defined in Python, whose attributes may be set."""
