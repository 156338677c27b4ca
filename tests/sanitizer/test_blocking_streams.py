"""Blocking streams (issue 14, hole 10): a stream made with CUDA's default flags, wrapped by
`torch.cuda.ExternalStream`, synchronizes with the legacy default stream both ways; a pool
stream wrapped the same way does not. End to end on the emulated device, and the CUDA
runtime query the real-GPU path makes, against a stand-in runtime."""

from __future__ import annotations

import ctypes
import json
from typing import Any

import pytest

from csan_lint.runtime.devices import CUDA_STREAM_NON_BLOCKING, CudaStreamFlags

GPU_TESTS = """
import ctypes

import torch


def blocking_stream():
    handle = ctypes.c_void_p()
    assert torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle)) == 0
    return torch.cuda.ExternalStream(handle.value)


def test_a_blocking_stream_is_ordered_with_the_default_stream_both_ways():
    side = blocking_stream()
    x = torch.ones(64, device="cuda")  # on the default stream
    with torch.cuda.stream(side):
        y = x * 2  # waits for the default stream's fill
    y.add_(1)  # the default stream waits for the blocking stream's mul
    del y  # y's block may go to the blocking stream's next allocation, which waits for the add_
    with torch.cuda.stream(side):
        torch.empty(64, device="cuda")


def test_a_stream_from_external_made_blocking_is_ordered_too():
    handle = ctypes.c_void_p()
    assert torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle)) == 0
    side = torch.cuda.get_stream_from_external(handle.value)
    x = torch.ones(64, device="cuda")
    with torch.cuda.stream(side):
        x.mul_(2)
    x.sum()


def test_a_pool_stream_wrapped_as_external_is_not_blocking():
    side = torch.cuda.ExternalStream(torch.cuda.Stream().cuda_stream)
    x = torch.ones(64, device="cuda")
    with torch.cuda.stream(side):
        y = x * 2  # races the fill
    y.add_(1)  # races the mul
    del x, y  # each block is freed for its stream while the other stream may still use it...
    torch.empty(64, device="cuda")  # ...and handed out again: x's block
    with torch.cuda.stream(side):
        torch.empty(64, device="cuda")  # y's block
"""


@pytest.mark.slow
def test_blocking_streams_end_to_end(pytester: pytest.Pytester):
    pytester.makepyfile(test_gpu=GPU_TESTS)
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", "--csan-device", "emulated", f"--csan-report={path}")
    races: dict[str, list[str]] = {}
    for record in map(json.loads, path.read_text().splitlines()):
        if record["type"] == "test-start":
            races[record["nodeid"].split("::")[1]] = []
        elif record["type"] == "race":
            races[record["nodeid"].split("::")[1]].append(record["report"]["kind"])
    assert races == {
        "test_a_blocking_stream_is_ordered_with_the_default_stream_both_ways": [],
        "test_a_stream_from_external_made_blocking_is_ordered_too": [],
        "test_a_pool_stream_wrapped_as_external_is_not_blocking": [
            "read-after-write",
            "write-after-write",
            "free-in-use",
            "free-in-use",
        ],
    }
    result.assert_outcomes(passed=2, failed=1)


class FakeRuntime:
    """Answers `cudaStreamGetFlags` from a table, as libcudart does through ctypes."""

    def __init__(self, flags: dict[int, int]) -> None:
        self.flags = flags

    def cudaStreamGetFlags(self, stream: ctypes.c_void_p, flags: Any) -> int:
        if stream.value not in self.flags:
            return 400  # cudaErrorInvalidResourceHandle
        flags.contents.value = self.flags[stream.value]
        return 0


def test_the_cuda_runtime_tells_blocking_streams_by_their_flags():
    loaded: list[str] = []

    def load(name: str) -> FakeRuntime:
        loaded.append(name)
        return FakeRuntime({0x7F10: 0, 0x7F20: CUDA_STREAM_NON_BLOCKING})

    flags = CudaStreamFlags("12.8", load=load)
    assert flags.is_blocking(0x7F10)
    assert not flags.is_blocking(0x7F20)
    assert not flags.is_blocking(0)  # the legacy default stream is not "blocking" towards itself
    assert loaded == ["libcudart.so.12"]  # loaded once, the major version torch was built with
    with pytest.raises(RuntimeError, match=r"cudaStreamGetFlags\(0x7f30\) failed with CUDA error 400"):
        flags.is_blocking(0x7F30)


def test_an_unloadable_cuda_runtime_is_a_clear_error():
    def load(name: str) -> FakeRuntime:
        raise OSError(f"{name}: cannot open shared object file")

    with pytest.raises(RuntimeError, match=r"cannot load libcudart\.so\.13: libcudart\.so\.13: cannot open"):
        CudaStreamFlags("13.0", load=load).is_blocking(0x7F10)
    with pytest.raises(RuntimeError, match="without CUDA"):
        CudaStreamFlags(None).is_blocking(0x7F10)


def test_a_stream_of_unknown_flags_is_taken_as_non_blocking_with_a_warning(monkeypatch: pytest.MonkeyPatch):
    import torch

    from csan_lint.runtime import emulation
    from csan_lint.runtime.sanitizer import CsanBlockingUnknownWarning, Sanitizer

    def unknown(handle: int) -> bool:
        raise RuntimeError("no runtime here")

    monkeypatch.setattr(emulation, "is_blocking_stream", unknown)
    with Sanitizer(device="emulated") as sanitizer:
        handle = ctypes.c_void_p()
        torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle))
        with pytest.warns(CsanBlockingUnknownWarning, match="taken as non-blocking"):
            side = torch.cuda.ExternalStream(handle.value)
        x = torch.ones(64, device="cuda")
        with torch.cuda.stream(side):
            x.mul_(2)  # csan-lint: ignore[CSL101,CSL201] (the race the test wants reported)
        assert [report.kind for report in sanitizer.errors] == ["write-after-write"]
        assert not sanitizer.broken  # checking goes on


def test_a_blocking_stream_wrapped_while_paused_is_still_known_as_blocking():
    import torch

    from csan_lint.runtime.sanitizer import Sanitizer

    with Sanitizer(device="emulated") as sanitizer:
        sanitizer.paused = True  # a test that opted out makes the stream
        handle = ctypes.c_void_p()
        torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle))
        side = torch.cuda.ExternalStream(handle.value)
        sanitizer.paused = False  # a later test uses it
        x = torch.ones(64, device="cuda")
        with torch.cuda.stream(side):
            x.mul_(2)  # csan-lint: ignore[CSL101,CSL201] (blocking: ordered after the fill)
        x.sum()  # csan-lint: ignore[CSL102] (the default stream waits for a blocking one)
    assert sanitizer.errors == []


def test_the_trace_says_the_stream_is_blocking_and_replays_the_same(tmp_path):
    import torch

    from csan_lint.runtime.sanitizer import Sanitizer
    from csan_lint.runtime.trace import replay
    from csan_lint.runtime.tracker import Tracker

    path = tmp_path / "blocking.trace.jsonl"
    with path.open("w") as out, Sanitizer(device="emulated", trace_out=out) as sanitizer:
        handle = ctypes.c_void_p()
        torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle))
        side = torch.cuda.ExternalStream(handle.value)
        x = torch.ones(64, device="cuda")
        with torch.cuda.stream(side):
            y = x * 2  # csan-lint: ignore[CSL101,CSL201] (blocking: ordered after the fill)
        y.sum()  # csan-lint: ignore[CSL102,CSL201] (the default stream waits for a blocking one)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert {"event": "stream_created", "stream": handle.value, "blocking": True, "stack": None} in records
    replayed = Tracker()
    replay(path, replayed)
    assert sanitizer.errors == [] and replayed.errors == []
