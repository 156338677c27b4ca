"""CUDA graphs on the emulated device: capture records the ops issued on capturing streams,
replay runs them again against the same storages.

The capture rules are CUDA's (stated in cuda_semantics.py, which the sanitizer asks too):
capture begins on a side stream (never the default stream) and ends on the stream it began on;
a stream joins the capture by waiting on an event recorded on a capturing stream, and must be
joined back (the origin stream waits on an event recorded after its last captured work) before
the capture ends; synchronizing a capturing stream is an error. As in CUDA, work that writes
memory in place (`x.add_(1)`, `static.copy_(batch)`) only happens at replay; ops that produce
new tensors run during capture too (their results must exist, and on CUDA their contents are
undefined until a replay), and replay refreshes them. Random numbers are drawn at replay only,
as CUDA's generator hands a graph its offsets per replay.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from csan_lint.runtime.cuda_semantics import (
    CAPTURE_ERROR_MODES,
    CAPTURE_FORBIDDEN,
    CAPTURE_ON_DEFAULT_STREAM,
    capture_forbids_sync,
)
from csan_lint.runtime.emulation import current, device, streams

_pool_ids = itertools.count(1)


class CUDAGraph:
    """`torch.cuda.CUDAGraph` of the emulated device."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.capturing = False
        self._captured = False
        self._stream = current.DEFAULT_STREAM
        # (op, arguments, keyword arguments, captured results or None for in-place work)
        self._ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []
        # Per capturing stream: how much work it captured, and how far it has seen (through
        # event waits) into each other stream's work. CUDA ends a capture only when the
        # origin stream has seen all of every forked stream.
        self._work: dict[int, int] = {}
        self._seen: dict[int, dict[int, int]] = {}
        self._pool = (0, next(_pool_ids))
        self._memory: Any = None  # the allocator holding its private pool, while it does
        self._mode = "global"
        self._thread = 0

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **kwargs: Any) -> None:
        handle = current.current_handle()
        if handle == current.DEFAULT_STREAM:
            raise RuntimeError(CAPTURE_ON_DEFAULT_STREAM.quote)
        if self._captured or self.capturing:
            raise RuntimeError(
                "This CUDAGraph instance already owns a captured graph. To capture a new graph, create a new instance."
            )
        if handle in streams.capturing:
            raise RuntimeError(CAPTURE_FORBIDDEN)
        if capture_error_mode not in CAPTURE_ERROR_MODES:
            raise RuntimeError(
                f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, got {capture_error_mode}"
            )
        if pool is not None:
            self._pool = tuple(pool)
        # Its allocations come from its private pool, kept while the graph lives.
        self._memory = device.memory.allocator
        self._memory.use_pool(self.pool_key(), 1)
        self._mode = capture_error_mode
        self._thread = threading.get_ident()
        self.capturing = True
        self._stream = handle
        self._work = {handle: 0}
        self._seen = {handle: {}}
        streams.capturing[handle] = self

    def capture_end(self) -> None:
        if not self.capturing:
            raise RuntimeError("CUDAGraph::capture_end called without a capture in progress")
        if current.current_handle() != self._stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        self.capturing = False
        for handle in [h for h, graph in streams.capturing.items() if graph is self]:
            del streams.capturing[handle]
        seen = self._seen[self._stream]
        if any(seen.get(stream, -1) < work for stream, work in self._work.items() if stream != self._stream):
            self._ops.clear()
            raise RuntimeError("CUDA error: capturing stream has unjoined work")
        self._captured = True
        if not any(self._work.values()):
            warnings.warn(
                "The CUDA Graph is empty. This usually means that the graph was attempted to be "
                "captured on wrong device or stream.",
                stacklevel=2,
            )

    def forbids_unsafe_calls(self) -> bool:
        """Whether a device-wide sync by the calling thread is an error during this capture."""
        return capture_forbids_sync(self._mode, self._thread == threading.get_ident())

    def snapshot(self, stream: int) -> dict[int, int]:
        """What an event recorded now on `stream` orders: its own work and what it has seen."""
        return {**self._seen[stream], stream: self._work[stream]}

    def join(self, stream: int, snapshot: dict[int, int]) -> None:
        """`stream` waits on an event with `snapshot`: it forks into the capture or joins."""
        self._work.setdefault(stream, 0)
        seen = self._seen.setdefault(stream, {})
        for other, work in snapshot.items():
            if other != stream and seen.get(other, -1) < work:
                seen[other] = work

    def record(self, func: Any, plan: Any, args: tuple[Any, ...], kwargs: dict[str, Any], execute: Any) -> Any:
        """One op issued on a capturing stream: `execute()` runs it the way the emulation
        would outside a capture."""
        stream = current.current_handle()
        self._work[stream] += 1
        if plan.writes is not None:
            results = [args[position] if position < len(args) else kwargs[name] for position, name in plan.writes]
            self._ops.append((func, args, kwargs, None))
            return results[0] if len(results) == 1 else tuple(results)
        if plan.seeded:
            # CUDA gives a captured op its random offsets at each replay: the capture itself
            # draws nothing from the device's generator.
            generator = device.rng.of(current.current_index())
            state = generator.get_state()
            try:
                out = execute()
            finally:
                generator.set_state(state)
        else:
            out = execute()
        if plan.fresh:
            replay_kwargs = {**kwargs, "pin_memory": False} if kwargs.get("pin_memory") else kwargs
            self._ops.append((func, args, replay_kwargs, out))
        return out

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        # One graph launch on CUDA, not a sequence of kernels that modes would see.
        with _disable_current_modes(), torch.no_grad():
            for func, args, kwargs, out in self._ops:
                if out is None:
                    device.rng.run(func, args, kwargs)
                    continue
                _refresh(out, device.rng.run(func, args, kwargs))

    def reset(self) -> None:
        self._ops.clear()
        self._captured = False
        memory, self._memory = self._memory, None
        if memory is not None:
            memory.use_pool(self.pool_key(), -1)

    def __del__(self) -> None:
        self.reset()

    def pool(self) -> tuple[int, int]:
        return self._pool

    def pool_key(self) -> int:
        """The allocator's key of the graph's private memory pool."""
        return -self._pool[1]

    def enable_debug_mode(self) -> None:
        """Nothing to debug: the emulation keeps no CUDA graph."""

    def debug_dump(self, debug_path: str) -> None:
        """Nothing to dump: the emulation keeps no CUDA graph."""


def _refresh(captured: Any, fresh: Any) -> None:
    if isinstance(captured, torch.Tensor):
        captured.copy_(fresh)
    elif isinstance(captured, (tuple, list)):
        for old, new in zip(captured, fresh, strict=True):
            if isinstance(old, torch.Tensor):
                old.copy_(new)


class graph:
    """`torch.cuda.graph`: capture on a side stream (the given one, else one shared by every
    `graph` that names none), after a device synchronization."""

    default_capture_stream: streams.Stream | None = None

    def __init__(
        self,
        cuda_graph: CUDAGraph,
        pool: Any = None,
        stream: streams.Stream | None = None,
        capture_error_mode: str = "global",
        **kwargs: Any,
    ) -> None:
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = streams.Stream()
        self.pool = pool
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        # The emulated Stream stands in for torch.cuda.Stream without being one.
        self.stream_ctx = torch.cuda.stream(self.capture_stream)  # type: ignore[arg-type]
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.cuda.synchronize()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: object) -> None:
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*exc)


def graph_pool_handle() -> tuple[int, int]:
    return (0, next(_pool_ids))
