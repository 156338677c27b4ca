"""The devices as a thread sees them: which device, and on each device which stream, is current
(c10's thread-local current device and per-device current stream, as `torch.cuda.device`,
`set_device`, `torch.cuda.stream` and c10's device guards change them), how a device is named
(`check_device`), and what the machine's devices answer about themselves.

Streams are named by their engine ids (`runtime/devices.py`: device k's default stream is
-2 - k; a pool stream's handle carries its device), so one thread-local id says which stream is
current on the current device, and the other devices' current streams are parked until their
device is current again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from csan_lint.runtime.devices import stream_key
from csan_lint.runtime.emulation import machine

DEFAULT_STREAM = 0
CUDA_TYPE = 1  # c10::DeviceType::CUDA

# .stream: the engine id of this thread's current stream on its current device (.device);
# .parked: the other devices' current streams; .previous: what `with stream:` replaced.
_local = threading.local()


def reset() -> None:
    """Every thread back on device 0's default stream."""
    global _local
    _local = threading.local()


def current_index() -> int:
    """The calling thread's current device."""
    return getattr(_local, "device", 0)


def current_handle() -> int:
    """The engine id of the calling thread's current stream (hot path: no Stream object)."""
    return getattr(_local, "stream", DEFAULT_STREAM)


def switch(index: int) -> int:
    """Make device `index` the calling thread's current device: the previous one."""
    previous = current_index()
    if index != previous:
        parked = _local.__dict__.setdefault("parked", {})
        parked[previous] = current_handle()
        _local.stream = parked.get(index, stream_key(DEFAULT_STREAM, index))
        _local.device = index
    return previous


@contextmanager
def on_device(index: int) -> Iterator[None]:
    """Device `index` current in the block (as c10's device guard makes it)."""
    previous = switch(index)
    try:
        yield
    finally:
        switch(previous)


def make_current(key: int, device: int) -> None:
    """Make stream `key` (of `device`) the calling thread's current stream, its device current."""
    switch(device)
    _local.stream = key


def enter_stream(key: int, device: int) -> None:
    """`with stream:` as torch's: the stream's device becomes current, and its stream this one."""
    previous_device = switch(device)
    _local.__dict__.setdefault("previous", []).append((previous_device, current_handle()))
    _local.stream = key


def exit_stream() -> None:
    """The end of the innermost `with stream:` block: its device and stream back."""
    device, _local.stream = _local.previous.pop()
    switch(device)


def current_streams() -> dict[int, int]:
    """Engine ids of the calling thread's current streams, by device (those it has set)."""
    found = dict(getattr(_local, "parked", {}))
    found[current_index()] = current_handle()
    return found


def current_key(index: int) -> int:
    """The engine id of device `index`'s current stream in the calling thread."""
    if index == current_index():
        return current_handle()
    parked: dict[int, int] = getattr(_local, "parked", {})
    return parked.get(index, stream_key(DEFAULT_STREAM, index))


def check_device(device: Any) -> int:
    """The device index `device` names (None: the current one); an invalid one raises as CUDA."""
    if device is None:
        return current_index()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = current_index() if device.index is None else device.index
    else:
        index = int(device)
    if index < 0:
        return current_index()
    if index >= machine.DEVICE_COUNT:
        raise RuntimeError("CUDA error: invalid device ordinal")
    return index


def set_stream(stream: Any) -> None:
    """`torch.cuda.set_stream`: a stream object (None: nothing changes)."""
    if stream is not None:
        set_stream_by_id(stream.stream_id, stream.device_index, CUDA_TYPE)


def set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
    """As `torch._C._cuda_setStream`: the stream's device becomes current too."""
    make_current(stream_key(stream_id, device_index), check_device(device_index))


def current_device() -> int:
    return current_index()


def set_device(device: Any) -> None:
    switch(check_device(device))


def exchange_device(device: int) -> int:
    """`torch.cuda._exchange_device`: select `device`, answer the previous one (-1: none)."""
    if device < 0:
        return -1
    return switch(check_device(device))


def is_available() -> bool:
    return True


def device_count() -> int:
    return machine.DEVICE_COUNT


def get_device_properties(device: Any = None) -> machine.DeviceProperties:
    check_device(device)
    return machine.DeviceProperties()


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    properties = get_device_properties(device)
    return properties.major, properties.minor
