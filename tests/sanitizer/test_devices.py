"""Several CUDA devices on a real GPU machine (not runnable here: the torch calls are played
by hand, or answered by monkeypatched torch entry points as a two-device CUDA build answers them;
tests/emulation/test_devices.py runs the same on an emulated machine of two devices). Every
device's default stream has handle 0, so the sanitizer gives the engine one id per (device,
stream); a device sync orders that device only; an op runs on its tensors' device's stream."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime import kinds
from csan_lint.runtime.devices import DeviceStreams, stream_key
from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.events import Access
from csan_lint.runtime.gpu_trace import GpuTraceHooks
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.sanitizer import _cuda_streams
from csan_lint.runtime.tracker import Tracker

X, Y = 0x100000, 0x200000


def test_default_streams_of_each_device_are_distinct_and_other_handles_stay():
    assert stream_key(0, 0) == 0
    assert len({stream_key(0, device) for device in range(4)}) == 4
    assert stream_key(0x7F00, 1) == 0x7F00
    assert all(stream_key(0, device) != -1 for device in range(4))  # -1 is the host


class TwoGpus:
    """A tracker wired to the trace callbacks as on a machine with two GPUs."""

    def __init__(self) -> None:
        self.device = 0
        self.tracker = Tracker()
        self.streams = DeviceStreams(lambda: self.device, lambda: 2)
        self.hooks = GpuTraceHooks(
            self.tracker,
            {},
            self._fail,
            current_stream=lambda: 0,
            after=lambda: None,
            lock=EngineLock(),
            stack=tuple,
            streams=self.streams,
        )
        self.hooks.register(real_cuda=False)

    def _fail(self, exc: BaseException) -> None:
        raise exc

    def launch(self, device: int, ptr: int, is_write: bool) -> None:
        stream = self.streams.key(0, device)
        self.tracker.kernel_launched(stream, "op", [Access(ptr, 64, is_write, "self")])

    def close(self) -> None:
        self.hooks.unregister()


def test_a_device_sync_orders_only_that_devices_streams():
    gpus = TwoGpus()
    try:
        gpus.launch(1, X, True)  # device 1's default stream writes X
        gpus.launch(0, Y, True)  # device 0's default stream writes Y
        gpus.device = 0
        _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()  # synchronize(device=0)
        gpus.launch(1, Y, False)  # ordered: the host waited for device 0
        assert gpus.tracker.errors == []
        gpus.launch(0, X, False)  # not ordered: nothing waited for device 1
        assert [e.kind for e in gpus.tracker.errors] == [kinds.READ_AFTER_WRITE]
    finally:
        gpus.close()


def test_an_event_between_two_default_streams_orders_them():
    gpus = TwoGpus()
    try:
        _gpu_trace.EventCreationCallbacks.fire_callbacks(7)
        gpus.launch(1, X, True)
        gpus.device = 1
        _gpu_trace.EventRecordCallbacks.fire_callbacks(7, 0)  # on device 1's default stream
        gpus.device = 0
        _gpu_trace.EventWaitCallbacks.fire_callbacks(7, 0)  # device 0's default stream waits
        gpus.launch(0, X, False)
        assert gpus.tracker.errors == []
        gpus.launch(1, Y, True)
        gpus.launch(0, Y, False)  # after the record: unordered
        assert [e.kind for e in gpus.tracker.errors] == [kinds.READ_AFTER_WRITE]
    finally:
        gpus.close()


def _raise(exc: BaseException) -> None:
    raise exc


def test_an_op_runs_on_its_tensors_device_not_the_current_one():
    tracker = Tracker()
    streams = DeviceStreams(lambda: 0, lambda: 2)
    on_device_1: set[int] = set()
    mode = SanitizerMode(
        tracker,
        is_device=lambda tensor: True,
        is_pinned=lambda tensor: False,
        current_stream=lambda: streams.key(0),  # device 0 is current
        on_internal_error=_raise,
        device_stream=lambda t: streams.key(0, 1 if t.untyped_storage().data_ptr() in on_device_1 else 0),
    )
    a = torch.ones(16)
    on_device_1.add(a.untyped_storage().data_ptr())
    with mode:
        a.mul_(2)
    tracker.kernel_launched(streams.key(0, 0), "read", [Access(a.data_ptr(), a.nbytes, False, "self")])
    report = tracker.errors[0]
    assert report.previous.stream == stream_key(0, 1) and report.current.stream == 0


class TwoDeviceBuild:
    """The torch entry points the real-GPU path calls, answered as a CUDA build with two devices
    answers them: the current device, each device's current stream, the device a tensor is on,
    and `torch._C._cuda_synchronize`, which fires the device-sync callback under the current
    device."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.device = 0
        self.current_streams = {0: 0, 1: 0}
        self.tensor_devices: dict[int, int] = {}
        patch = monkeypatch.setattr
        patch(torch.cuda, "_lazy_init", lambda: None)
        patch(torch.cuda, "_exchange_device", self._exchange)
        patch(torch.cuda, "_maybe_exchange_device", self._exchange)
        patch(torch.cuda, "current_device", lambda: self.device)
        patch(torch.cuda, "device_count", lambda: 2)
        patch(torch._C, "_cuda_getDevice", lambda: self.device, raising=False)
        patch(torch._C, "_cuda_getCurrentRawStream", lambda device: self.current_streams[device], raising=False)
        patch(torch._C, "_cuda_synchronize", _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks, raising=False)
        patch(torch.Tensor, "get_device", lambda t: self.tensor_devices.get(t.untyped_storage().data_ptr(), 0))

    def _exchange(self, device: int) -> int:
        previous = self.device
        if device >= 0:
            self.device = device
        return previous


@pytest.fixture
def two_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TwoDeviceBuild, Tracker, DeviceStreams]]:
    """A tracker wired as `Sanitizer.enable()` wires it on a real GPU, over `TwoDeviceBuild`."""
    build = TwoDeviceBuild(monkeypatch)
    tracker = Tracker()
    keys = DeviceStreams(torch.cuda.current_device, torch.cuda.device_count)
    current, _ = _cuda_streams(keys)
    hooks = GpuTraceHooks(
        tracker,
        {},
        _raise,
        current_stream=current,
        after=lambda: None,
        lock=EngineLock(),
        stack=tuple,
        streams=keys,
    )
    hooks.register(real_cuda=False)
    try:
        yield build, tracker, keys
    finally:
        hooks.unregister()


def test_torch_cuda_synchronize_of_one_device_orders_only_that_device(two_devices):
    build, tracker, keys = two_devices
    current, _ = _cuda_streams(keys)
    tracker.kernel_launched(current(), "write", [Access(X, 64, True, "self")])  # device 0
    build.device = 1
    tracker.kernel_launched(current(), "write", [Access(Y, 64, True, "self")])  # device 1
    build.device = 0
    torch.cuda.synchronize(1)
    assert build.device == 0  # torch's device guard put it back
    tracker.kernel_launched(current(), "read", [Access(Y, 64, False, "self")])  # after the sync
    assert tracker.errors == []
    build.device = 1
    tracker.kernel_launched(current(), "read", [Access(X, 64, False, "self")])  # device 0 never synced
    assert [(e.kind, e.previous.stream, e.current.stream) for e in tracker.errors] == [
        (kinds.READ_AFTER_WRITE, 0, stream_key(0, 1))
    ]


def test_an_op_on_another_devices_tensor_runs_on_that_devices_current_stream(two_devices):
    build, tracker, keys = two_devices
    current, of_tensor = _cuda_streams(keys)
    mode = SanitizerMode(
        tracker,
        is_device=lambda tensor: True,
        is_pinned=lambda tensor: False,
        current_stream=current,
        on_internal_error=_raise,
        device_stream=of_tensor,
    )
    build.current_streams[1] = 0x7F00  # device 1's current stream is a side stream
    a = torch.ones(16)
    build.tensor_devices[a.untyped_storage().data_ptr()] = 1
    with mode:
        a.mul_(2)  # device 0 is current
    tracker.kernel_launched(current(), "read", [Access(a.data_ptr(), a.nbytes, False, "self")])
    assert [(e.previous.stream, e.current.stream) for e in tracker.errors] == [(0x7F00, 0)]
