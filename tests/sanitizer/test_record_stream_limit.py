"""docs/sanitizer.md, "record_stream done in C++": torch 2.13 tells Python of allocations and
frees but not of a stream recorded on a block. If a torch upgrade adds such a callback, this
fails, and the sanitizer should listen to it instead of documenting the limit."""

from __future__ import annotations

import torch
from torch.cuda import _gpu_trace

KNOWN_CALLBACKS = {
    "EventCreationCallbacks",
    "EventDeletionCallbacks",
    "EventRecordCallbacks",
    "EventWaitCallbacks",
    "MemoryAllocationCallbacks",
    "MemoryDeallocationCallbacks",
    "StreamCreationCallbacks",
    "DeviceSynchronizationCallbacks",
    "StreamSynchronizationCallbacks",
    "EventSynchronizationCallbacks",
}


def test_gpu_trace_has_no_stream_use_callback():
    registries = {name for name, value in vars(_gpu_trace).items() if isinstance(value, _gpu_trace.CallbackRegistry)}
    assert registries == KNOWN_CALLBACKS


def test_torch_binds_no_allocator_trace_tracker():
    """The caching allocator's C++ trace tracker (which sees every action) has no Python binding."""
    assert not [name for name in dir(torch._C) if "trace_tracker" in name.lower() or "tracetracker" in name.lower()]
