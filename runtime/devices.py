"""Streams of several CUDA devices in one engine. On a GPU every device's default stream has
handle 0, so the sanitizer gives the engine one id per (device, handle): the handle itself,
except for the default streams of devices other than 0. It also remembers each stream's device,
so that `torch.cuda.synchronize(device=k)` (one trace callback, no argument, fired under
device k) orders only device k's streams. The emulated device has one device and needs none
of this."""

from __future__ import annotations

from collections.abc import Callable


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
