"""Streams of several CUDA devices in one engine. On a GPU every device's default stream has
handle 0, so the sanitizer gives the engine one id per (device, handle): the handle itself,
except for the default streams of devices other than 0. It also remembers each stream's device,
so that `torch.cuda.synchronize(device=k)` (one trace callback, no argument, fired under
device k) orders only device k's streams. An emulated machine of several devices uses the same
ids (its handles are these ids already; its trace callbacks name each default stream 0, as a
GPU's do). `CudaStreamFlags` asks the CUDA runtime whether a stream made outside torch's pool
is blocking."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

CUDA_STREAM_NON_BLOCKING = 0x1
"""`cudaStreamNonBlocking`: the flag of every pool stream torch makes; a stream without it
synchronizes with the legacy default stream (handle 0)."""


def stream_key(handle: int, device: int) -> int:
    """The engine's id of stream `handle` of `device` (-1 is the host's, so -2 - device)."""
    return handle if handle or device <= 0 else -2 - device


class DeviceStreams:
    """Engine ids of the streams seen so far, with their devices."""

    def __init__(self, current_device: Callable[[], int], device_count: Callable[[], int]) -> None:
        self.current_device = current_device
        self.device_count = device_count
        self.devices: dict[int, int] = {}

    def key(self, handle: int, device: int | None = None) -> int:
        """The id of `handle` on `device` (None: the current device, as a trace callback
        fires under the stream's device)."""
        if device is None:
            device = self.current_device()
        key = stream_key(handle, device)
        if key not in self.devices:
            self.devices[key] = device
        return key

    def synced_by_device_sync(self) -> list[int] | None:
        """The streams a device sync fired now orders; None: every stream (one device)."""
        if self.device_count() <= 1:
            return None
        device = self.current_device()
        self.key(0, device)  # its default stream, even if unseen so far
        return [key for key, owner in self.devices.items() if owner == device]


class CudaStreamFlags:
    """Whether a real CUDA stream is blocking, from `cudaStreamGetFlags` of the CUDA runtime
    torch loaded (`libcudart.so.<major>`, found on first use). `load`: how a library is opened
    (ctypes.CDLL; tests pass a stand-in)."""

    def __init__(self, cuda_version: str | None, load: Callable[[str], Any] = ctypes.CDLL) -> None:
        self.cuda_version = cuda_version
        self.load = load
        self._runtime: Any = None

    def is_blocking(self, handle: int) -> bool:
        """Raises a RuntimeError that says why when the runtime cannot tell."""
        if handle == 0:
            return False  # the legacy default stream itself
        if self._runtime is None:
            if not self.cuda_version:
                raise RuntimeError("torch was built without CUDA: no CUDA runtime to ask")
            library = f"libcudart.so.{self.cuda_version.split('.')[0]}"
            try:
                self._runtime = self.load(library)
            except OSError as exc:
                raise RuntimeError(f"cannot load {library}: {exc}") from exc
        flags = ctypes.c_uint()
        status = self._runtime.cudaStreamGetFlags(ctypes.c_void_p(handle), ctypes.pointer(flags))
        if status:
            raise RuntimeError(f"cudaStreamGetFlags({handle:#x}) failed with CUDA error {status}")
        return not flags.value & CUDA_STREAM_NON_BLOCKING
