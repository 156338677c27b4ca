"""The device-generic and low-level spellings of the emulated device's API: `torch.accelerator.*`
(through the `torch._C` functions it calls), the raw stream functions torch's own helpers call
(`torch._C._cuda_setStream`, which PyTorch's TestCase uses to run each test on a side stream),
`torch.cuda.ExternalStream`, `torch.cuda.cudart()`, the legacy `torch.cuda.FloatTensor`-style
types, and the version and allocator answers tests read. The stand-ins for `torch.Stream` and
`torch.Event` live in streams.py: they are the bases of the emulated Stream and Event."""

from __future__ import annotations

import ctypes
from typing import Any, cast

import torch

from csan_lint.runtime.emulation import cuda_state, current, device, machine, streams
from csan_lint.runtime.emulation.device import CUDA, is_device

CUDA_VERSION = "12.8"
"""What `torch.version.cuda` answers: the toolkit torch 2.13's default CUDA wheels use."""


class ExternalStream(streams.Stream):
    """`torch.cuda.ExternalStream(handle)`: the emulated stream with that handle (a class, as
    torch's is, so the sanitizer wraps the same `__new__` on both devices)."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs: Any) -> ExternalStream:
        stream = super().__new__(cls, stream_id=stream_ptr, device_index=current.check_device(device))
        return cast(ExternalStream, stream)


def _stream_of(stream: Any) -> streams.Stream:
    """An emulated stream for any stream object naming one (a generic `torch.Stream` too)."""
    if isinstance(stream, streams.Stream):
        return stream
    return streams.Stream(stream_id=stream.stream_id, device_index=stream.device_index)


def _set_stream(stream: Any) -> None:
    current.set_stream(_stream_of(stream))


def _set_stream_by_id(stream_id: int = 0, device_index: int = 0, device_type: int = 0) -> None:
    current.set_stream_by_id(stream_id, device_index, device_type)


def _current_stream_triple(device: Any = None) -> tuple[int, int, int]:
    stream = streams.current_stream(device)
    return stream.stream_id, stream.device_index, current.CUDA_TYPE


def _default_stream_triple(device: Any = None) -> tuple[int, int, int]:
    return current.DEFAULT_STREAM, current.check_device(device), current.CUDA_TYPE


def _device_index(device_index: Any) -> int | None:
    """A device index as torch.accelerator checks it (None or -1: the current device)."""
    if device_index is None or device_index < 0:
        return None
    if device_index >= current.device_count():
        raise RuntimeError(f"Device index value {device_index} is out of index range [0, {current.device_count()})")
    return device_index


def _synchronize_device(device_index: Any = None) -> None:
    streams.synchronize(_device_index(device_index))


def _memory_info(device_index: Any = None) -> tuple[int, int]:
    return cuda_state.mem_get_info()


def _own(function: Any) -> Any:
    """A function object of its own: torch._dynamo's rules table refuses one object under two
    torch names (here a `torch._C` name and the `torch.cuda` one it backs)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return call


ACCELERATOR_FUNCTIONS: dict[str, Any] = {
    "_accelerator_getAccelerator": lambda: torch.device("cuda"),
    "_accelerator_getDeviceIndex": current.current_device,
    "_accelerator_setDeviceIndex": current.set_device,
    "_accelerator_exchangeDevice": current.exchange_device,
    "_accelerator_maybeExchangeDevice": current.exchange_device,
    "_accelerator_getStream": lambda device_index=None: streams.current_stream(_device_index(device_index)),
    "_accelerator_setStream": _set_stream,
    "_accelerator_synchronizeDevice": _synchronize_device,
    "_accelerator_isAllocatorInitialized": machine.returns(True),
    "_accelerator_emptyCache": machine.no_op,
    "_accelerator_emptyHostCache": lambda: device.pinned_pool.empty_cache(),
    "_accelerator_getDeviceStats": lambda device_index=None: cuda_state.memory_stats(),
    "_accelerator_getMemoryInfo": _memory_info,
    "_accelerator_resetPeakStats": lambda device_index=None: cuda_state.reset_peak_memory_stats(),
    "_accelerator_resetAccumulatedStats": machine.no_op,
    "_accelerator_getDeviceCapability": lambda device_index=None: {},
}
"""`torch._C` functions behind `torch.accelerator.*` (their names in torch 2.13)."""
ACCELERATOR_FUNCTIONS = {name: _own(function) for name, function in ACCELERATOR_FUNCTIONS.items()}

RAW_CUDA_FUNCTIONS: dict[str, Any] = {
    "_cuda_setStream": _set_stream_by_id,
    "_cuda_getCurrentStream": _current_stream_triple,
    "_cuda_getDefaultStream": _default_stream_triple,
    "_cuda_getCurrentRawStream": lambda device=None: streams.current_stream(device).stream_id,
    "_cuda_getStreamFromExternal": lambda stream_ptr, device_index=0: (stream_ptr, 0, current.CUDA_TYPE),
    "_cuda_setDevice": current.set_device,
    "_cuda_getDevice": current.current_device,
    "_cuda_getDeviceCount": current.device_count,
    "_cuda_exchangeDevice": current.exchange_device,
    "_cuda_maybeExchangeDevice": current.exchange_device,
    "_cuda_synchronize": lambda: streams.synchronize(),
    "_cuda_isCurrentStreamCapturing": streams.is_current_stream_capturing,
    "_cuda_isInBadFork": machine.returns(False),
    "_cuda_getAllocatorBackend": machine.returns("native"),
    "_cuda_memoryStats": cuda_state.memory_stats,
    "_cuda_resetPeakMemoryStats": cuda_state.reset_peak_memory_stats,
    "_cuda_resetAccumulatedMemoryStats": machine.no_op,
    "_cuda_clearCublasWorkspaces": machine.no_op,
    "_cuda_get_sync_debug_mode": machine.returns(0),
    "_cuda_set_sync_debug_mode": machine.no_op,
    "_host_emptyCache": lambda: device.pinned_pool.empty_cache(),
}
"""`torch._C` functions of a CUDA build that torch's Python helpers and test bases call."""
RAW_CUDA_FUNCTIONS = {name: _own(function) for name, function in RAW_CUDA_FUNCTIONS.items()}


class Cudart:
    """`torch.cuda.cudart()`: host registration pins memory; every other call succeeds (0)."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # host pointer -> size, as cudaHostRegister got them

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> int:
        self.registered[ptr] = size
        return 0

    def cudaHostUnregister(self, ptr: int) -> int:
        return 0 if self.registered.pop(ptr, None) is not None else 1  # cudaErrorInvalidValue

    def cudaStreamCreate(self, ptr: int) -> int:
        """Writes a new blocking stream's handle at `ptr` (a `cudaStream_t*`), as CUDA does."""
        ctypes.c_void_p.from_address(ptr).value = streams.create_blocking_stream()
        return 0

    def cudaStreamDestroy(self, handle: int) -> int:
        return 0 if streams.destroy_stream(handle) else 1  # cudaErrorInvalidValue

    def covers(self, ptr: int, size: int) -> bool:
        return any(base <= ptr and ptr + size <= base + length for base, length in self.registered.items())

    def __getattr__(self, name: str) -> Any:
        return machine.returns(0)


cudart = Cudart()


def reset() -> None:
    cudart.registered.clear()


class _LegacyType(type):
    """`torch.cuda.FloatTensor` and its kin: a device tensor of one dtype, as a type to call
    (`torch.cuda.FloatTensor([1])`, `torch.cuda.LongTensor(2, 3)`) or to test against."""

    dtype: torch.dtype

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch.Tensor) and instance.dtype == cls.dtype and is_device(instance)

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not args:
            return torch.empty(0, dtype=cls.dtype, device=CUDA)
        if len(args) == 1 and not isinstance(args[0], int):
            data = args[0]
            if isinstance(data, torch.Size):
                return torch.empty(data, dtype=cls.dtype, device=CUDA)
            return torch.tensor(data, dtype=cls.dtype, device=CUDA)
        return torch.empty(*args, dtype=cls.dtype, device=CUDA)


LEGACY_TYPES = {
    name: _LegacyType(name, (), {"dtype": dtype, "__module__": "torch.cuda"})
    for name, dtype in {
        "DoubleTensor": torch.float64,
        "FloatTensor": torch.float32,
        "HalfTensor": torch.float16,
        "BFloat16Tensor": torch.bfloat16,
        "LongTensor": torch.int64,
        "IntTensor": torch.int32,
        "ShortTensor": torch.int16,
        "CharTensor": torch.int8,
        "ByteTensor": torch.uint8,
        "BoolTensor": torch.bool,
    }.items()
}
