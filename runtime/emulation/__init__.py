"""The emulated CUDA device: unmodified GPU test code runs on a CPU-only torch build.

While active, `torch.cuda.is_available()` is True, tensors made with `device="cuda"` (or
moved there) report `cuda:0` (or `cuda:k` of `CSAN_LINT_DEVICES` devices) and keep their data
in CPU memory, and the `torch.cuda`
stream/event/graph API is a faithful fake that fires the `torch.cuda._gpu_trace` callbacks
the CUDA runtime fires, so a sanitizer listening to them works the same on both.

`activate()` patches torch (and `threading.Thread`, so new threads get the device too);
`deactivate()` restores every patched attribute exactly. Activate before the test modules
are imported: GPU suites evaluate `skipif(not torch.cuda.is_available())` at import.

The device-generic spellings (`torch.Stream("cuda")`, `torch.Event("cuda")` in streams.py;
`torch.accelerator.*` in generic.py), the raw `torch._C._cuda_*` stream functions,
`torch.cuda.cudart()` (with blocking streams for `ExternalStream`) and the legacy
`torch.cuda.FloatTensor` types are emulated too (generic.py), and so are autograd's
streams (backward on each forward op's stream, autograd_streams.py) and the caching host
allocator's reuse of pinned blocks (device.py).

Modules: device.py (the dispatch mode and pinned memory), memory.py (which storages are the
device's), allocator.py (CUDA's caching allocator over host segments), gaps.py (`EmulationGap`
for what is not emulated), tensors.py (Tensor and Storage attributes), streams.py (streams,
events, syncs, queries), graphs.py (CUDA graphs), generic.py, autograd_streams.py,
cuda_state.py (memory statistics, RNG state), machine.py (the device count and properties),
children.py (child processes
get the device; the sanitizer too when the parent runs sanitized: runtime/child_races.py).

Known gaps: threads started before `activate()` have no device (dispatch modes are per
thread); sparse device tensors (an `EmulationGap`) and `DataParallel`'s scatter are not
emulated; torch's
C++ names the CPU when it means "the tensor's device", so a host leaf moved to the device
gets its gradient on the device (and one moved between devices, on the one it was moved to).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.cuda.graphs
import torch.cuda.memory
import torch.cuda.nvtx
import torch.cuda.streams
import torch.utils._device
from torch.jit import _builtins
from torch.utils._python_dispatch import _get_current_dispatch_mode

from csan_lint.runtime import eager_compile
from csan_lint.runtime.emulation import (
    autograd_streams,
    children,
    cuda_state,
    current,
    device,
    generic,
    graphs,
    machine,
    streams,
    tensors,
)
from csan_lint.runtime.patches import Patches

__all__ = [
    "activate",
    "current_stream_handle",
    "deactivate",
    "device_count",
    "emulated",
    "is_active",
    "is_blocking_stream",
    "is_device",
    "is_pinned",
    "tensor_stream",
]

# Cheap per-op queries for a sanitizer stacked on the emulation (no Stream object, no getter).
is_device = device.is_device
is_pinned = device.is_pinned_host
current_stream_handle = autograd_streams.op_stream
is_blocking_stream = streams.is_blocking
device_count = current.device_count


def tensor_stream(tensor: torch.Tensor) -> int:
    """The engine id of the stream an op on device tensor `tensor` runs on: its device's
    current stream (the op's, on the current device)."""
    index = device.device_index(tensor)
    if index == current.current_index():
        return autograd_streams.op_stream()
    return current.current_key(index)


class _State:
    def __init__(self) -> None:
        self.patches = Patches()
        self.mode: device.DeviceMode | None = None
        self.thread: threading.Thread | None = None


_state = _State()
_base_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _bootstrap_inner(thread: threading.Thread) -> None:
    # Dispatch modes are per thread: a thread started while the device is emulated gets it.
    with device.DeviceMode():
        _base_bootstrap(thread)


def _cuda_functions() -> dict[str, Any]:
    return {
        "is_available": current.is_available,
        "device_count": current.device_count,
        "current_device": current.current_device,
        "set_device": current.set_device,
        "get_device_name": current.get_device_name,
        "get_device_capability": current.get_device_capability,
        "get_device_properties": current.get_device_properties,
        "_lazy_init": machine.no_op,
        "init": machine.no_op,
        "is_initialized": current.is_available,
        "_initialized": True,  # what `_lazy_init` leaves; checkpoint saves device RNG states only then
        "_exchange_device": current.exchange_device,
        "_maybe_exchange_device": current.exchange_device,
        "Stream": streams.Stream,
        "Event": streams.Event,
        "current_stream": streams.current_stream,
        "default_stream": streams.default_stream,
        "set_stream": current.set_stream,
        "_set_stream_by_id": current.set_stream_by_id,
        "synchronize": streams.synchronize,
        "is_current_stream_capturing": streams.is_current_stream_capturing,
        "CUDAGraph": graphs.CUDAGraph,
        "graph": graphs.graph,
        "graph_pool_handle": graphs.graph_pool_handle,
        "manual_seed": cuda_state.manual_seed,
        "manual_seed_all": cuda_state.manual_seed_all,
        "seed": cuda_state.seed,
        "seed_all": cuda_state.seed_all,
        "initial_seed": cuda_state.initial_seed,
        "get_rng_state": cuda_state.get_rng_state,
        "set_rng_state": cuda_state.set_rng_state,
        "get_rng_state_all": cuda_state.get_rng_state_all,
        "set_rng_state_all": cuda_state.set_rng_state_all,
        "ipc_collect": machine.no_op,
        "set_sync_debug_mode": machine.no_op,
        "get_sync_debug_mode": machine.returns(0),
        "is_bf16_supported": machine.returns(True),
        "get_allocator_backend": machine.returns("native"),
        "_sleep": streams.sleep,
        "cudart": machine.returns(generic.cudart),
        "ExternalStream": generic.ExternalStream,
        **generic.LEGACY_TYPES,
    }


def _memory_functions() -> dict[str, Any]:
    return {
        "empty_cache": cuda_state.empty_cache,
        "memory_stats": cuda_state.memory_stats,
        "memory_summary": cuda_state.memory_summary,
        "memory_allocated": cuda_state.memory_allocated,
        "memory_reserved": cuda_state.memory_reserved,
        "max_memory_allocated": cuda_state.max_memory_allocated,
        "max_memory_reserved": cuda_state.max_memory_reserved,
        "reset_peak_memory_stats": cuda_state.reset_peak_memory_stats,
        "reset_max_memory_allocated": cuda_state.reset_peak_memory_stats,
        "reset_max_memory_cached": cuda_state.reset_peak_memory_stats,
        "reset_accumulated_memory_stats": cuda_state.reset_accumulated_memory_stats,
        "memory_cached": cuda_state.memory_reserved,
        "max_memory_cached": cuda_state.max_memory_reserved,
        "mem_get_info": cuda_state.mem_get_info,
    }


def _patches() -> list[tuple[Any, str, Any]]:
    table: list[tuple[Any, str, Any]] = [(torch.cuda, name, value) for name, value in _cuda_functions().items()]
    # torch.cuda's memory functions call each other inside torch.cuda.memory: patch both.
    for name, value in _memory_functions().items():
        table += [(torch.cuda, name, value), (torch.cuda.memory, name, value)]
    table += [
        (torch.cuda.streams, "Stream", streams.Stream),
        (torch.cuda.streams, "Event", streams.Event),
        (torch.cuda.streams, "ExternalStream", generic.ExternalStream),
        (torch.cuda.graphs, "CUDAGraph", graphs.CUDAGraph),
        (torch.cuda.graphs, "graph", graphs.graph),
        (torch.cuda.graphs, "graph_pool_handle", graphs.graph_pool_handle),
        (torch.cuda.graphs, "is_current_stream_capturing", streams.is_current_stream_capturing),
        (torch.cuda.nvtx, "_nvtx", machine.Nvtx()),
        (torch.cuda.memory, "get_allocator_backend", machine.returns("native")),
        (torch.version, "cuda", generic.CUDA_VERSION),
        (torch, "Stream", streams.GenericStream),
        (torch.autograd, "backward", autograd_streams.joined(torch.autograd.backward)),
        (torch.autograd, "grad", autograd_streams.joined(torch.autograd.grad)),
        (torch, "Event", streams.GenericEvent),
        (threading.Thread, "_bootstrap_inner", _bootstrap_inner),
    ]
    table += [(torch._C, name, value) for name, value in generic.ACCELERATOR_FUNCTIONS.items()]
    table += [(torch._C, name, value) for name, value in generic.RAW_CUDA_FUNCTIONS.items()]
    table += [(torch.Tensor, name, value) for name, value in tensors.TENSOR_ATTRIBUTES.items()]
    table += [(torch.UntypedStorage, name, value) for name, value in tensors.STORAGE_ATTRIBUTES.items()]
    table += [(torch, name, value) for name, value in tensors.TORCH_FUNCTIONS.items()]
    table += [(torch._C._nn, "_parse_to", tensors.parse_to)]
    table += [(torch.utils._device, "_device_constructors", tensors.device_constructors())]
    table += [(torch.amp.autocast_mode.autocast, name, value) for name, value in tensors.AUTOCAST_ATTRIBUTES.items()]
    return table


def is_active() -> bool:
    return _state.mode is not None


def activate() -> None:
    """Emulate a CUDA device from now on (this thread and threads started from now on)."""
    if is_active():
        return
    streams.reset()
    device.reset()
    generic.reset()
    autograd_streams.reset()
    graphs.graph.default_capture_stream = None
    for owner, name, value in _patches():
        _state.patches.set(owner, name, value)
    _state.patches.set_items(_builtins._get_builtin_table(), tensors.script_builtins())
    eager_compile.run_eagerly(_state.patches)  # dynamo cannot trace under the device's dispatch mode
    device.active = True
    children.export()
    _state.mode = device.DeviceMode()
    _state.mode.__enter__()
    _state.thread = threading.current_thread()


def deactivate() -> None:
    """Give torch back exactly as it was; device tensors still alive become CPU tensors."""
    mode = _state.mode
    if mode is None:
        return
    if threading.current_thread() is not _state.thread:
        raise RuntimeError("csan-lint emulation: deactivate() must run on the thread that activated it")
    if _get_current_dispatch_mode() is not mode:
        raise RuntimeError(
            "csan-lint emulation: deactivate() with another TorchDispatchMode still active above "
            "the emulated device; exit it first"
        )
    mode.__exit__(None, None, None)
    device.active = False
    _state.mode = None
    _state.thread = None
    _state.patches.restore()
    children.withdraw()
    streams.reset()
    device.reset()
    autograd_streams.reset()


@contextmanager
def emulated() -> Iterator[None]:
    """`with emulated():` the block runs on the emulated device."""
    was_active = is_active()
    activate()
    try:
        yield
    finally:
        if not was_active:
            deactivate()
