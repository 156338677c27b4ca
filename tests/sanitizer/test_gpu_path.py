"""What a first run on a GPU would hit, each shown on the emulated device where it can be and on
a real GPU under `requires_cuda` (benchmarks/gpu/check.sh runs those): enabling and disabling
in one process, the device-generic torch.Event / torch.Stream, `torch.compile`d code, events
recorded before checking began, and blocking streams on two devices."""

from __future__ import annotations

import ctypes
import io
import sys
import threading
from collections.abc import Iterator

import pytest
import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime import emulation, gpu_trace, kinds, torch_internals
from csan_lint.runtime.sanitizer import Sanitizer
from csan_lint.runtime.stacks import innermost_user_frame

DEVICES = ["emulated", pytest.param("cuda", marks=pytest.mark.requires_cuda)]
N = 4096


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> Iterator[str]:
    """The device, with the emulation already active for "emulated" (as the pytest plugin
    makes it): torch objects made before `enable()` exist on it."""
    if request.param == "cuda":
        yield "cuda"
        return
    with emulation.emulated():
        yield "emulated"


# -- enable, disable, enable -------------------------------------------------------------------


def test_cuda_tracing_is_switched_on_once_per_process(monkeypatch: pytest.MonkeyPatch):
    calls = []
    monkeypatch.setattr(torch._C, "_activate_gpu_trace", lambda: calls.append(1), raising=False)
    monkeypatch.setattr(gpu_trace, "_cuda_trace_active", False)
    sanitizer = Sanitizer(device="emulated")
    for _ in range(3):  # as enable() on a GPU does, then disable()
        sanitizer.hooks.register(real_cuda=True)
        sanitizer.hooks.unregister()
    assert calls == [1]


def test_no_callback_of_ours_runs_while_disabled(device):
    before = gpu_trace.our_callbacks()
    sanitizer = Sanitizer(device=device)
    seen = []
    for cycle in range(2):
        sanitizer.enable()
        assert gpu_trace.our_callbacks() == before + len(gpu_trace.REGISTRY_NAMES)
        x = torch.ones(N, device="cuda")
        torch.cuda.synchronize()
        sanitizer.disable()
        assert gpu_trace.our_callbacks() == before
        calls = sanitizer.tracker.stats()
        y = torch.ones(N, device="cuda") * 2  # allocations, a kernel, a sync: none reach us
        torch.cuda.synchronize()
        _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks()
        assert sanitizer.tracker.stats() == calls, cycle
        seen.append(len(sanitizer.errors))
        del x, y
    assert seen == [0, 0]


# -- torch.Event / torch.Stream ------------------------------------------------------------------


def _written_on_side(side: torch.Stream) -> torch.Tensor:
    data = torch.ones(N, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with side:
        data.add_(1)
    return data


def test_a_generic_event_query_that_answers_true_orders_the_host(device):
    with Sanitizer(device=device) as sanitizer:
        side = torch.Stream("cuda")
        data = _written_on_side(side)
        event = torch.Event("cuda")
        event.record(side)
        while not event.query():
            pass
        data.mul_(2)  # the host saw the side stream's work done: ordered
    assert sanitizer.errors == []


def test_a_generic_stream_query_that_answers_true_orders_the_host(device):
    with Sanitizer(device=device) as sanitizer:
        side = torch.Stream("cuda")
        data = _written_on_side(side)
        while not side.query():
            pass
        data.mul_(2)
    assert sanitizer.errors == []


def test_a_wait_on_a_never_recorded_generic_event_is_reported(device):
    with Sanitizer(device=device) as sanitizer:
        torch.Event("cuda").wait()
        torch.Stream("cuda").wait_event(torch.Event("cuda"))
    assert [error.kind for error in sanitizer.errors] == [kinds.WAIT_UNRECORDED_EVENT] * 2


def _unsynced_side_read(x: torch.Tensor, side: torch.cuda.Stream) -> torch.Tensor:
    with torch.cuda.stream(side):
        return x * 2  # reads x, written on the default stream, with no wait


def test_a_race_inside_a_compiled_function_is_reported(device):
    with Sanitizer(device=device) as sanitizer:
        x = torch.ones(N, device="cuda")
        x.add_(1)
        torch.compile(_unsynced_side_read, fullgraph=True)(x, torch.cuda.Stream())
        torch.cuda.synchronize()
    assert [error.kind for error in sanitizer.errors] == [kinds.READ_AFTER_WRITE]
    assert innermost_user_frame(sanitizer.errors[0].current.stack).function == "_unsynced_side_read"


# -- events recorded before checking began ----------------------------------------------------


def test_an_event_recorded_before_enable_orders_and_is_not_unrecorded(device):
    side = torch.cuda.Stream()
    event = torch.cuda.Event()
    event.record(side)
    with Sanitizer(device=device) as sanitizer:
        event.wait()
        torch.cuda.current_stream().wait_event(event)
    assert sanitizer.errors == []


def test_an_event_recorded_before_a_restart_is_not_unrecorded(device):
    with Sanitizer(device=device) as sanitizer:
        event = torch.Event("cuda")
        event.record()
        sanitizer.restart()  # fresh shadow state, as after an internal error
        event.wait()
        torch.Event("cuda").wait()  # still reported: it was never recorded
    assert [error.kind for error in sanitizer.errors] == [kinds.WAIT_UNRECORDED_EVENT]
    assert sanitizer.errors[0].current.stack  # the sanitizer's own report, at the user's line
    assert sanitizer.internal_errors == []


# -- several devices ----------------------------------------------------------------------------


@pytest.mark.requires_cuda
def test_blocking_streams_on_two_devices_sync_with_their_own_default_stream():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    cudart = torch.cuda.cudart()
    with Sanitizer(device="cuda") as sanitizer:
        with torch.cuda.device(1):
            handle = ctypes.c_void_p()
            assert cudart.cudaStreamCreate(ctypes.addressof(handle)) == 0  # default flags: blocking
            blocking = torch.cuda.ExternalStream(handle.value, device=1)
            data = torch.zeros(N, device="cuda:1")
            torch.cuda.synchronize(1)
            with torch.cuda.stream(blocking):
                data.add_(1)
            data.mul_(2)  # device 1's default stream: ordered after the blocking stream
            torch.cuda.synchronize(1)
            cudart.cudaStreamDestroy(handle.value)
    assert sanitizer.errors == []


# -- backward on autograd's threads --------------------------------------------------------------


def test_a_backward_race_on_a_thread_with_no_user_frame_is_reported_at_the_forward_line(device):
    """On a GPU, backward ops run on autograd's device threads, whose stacks hold no user
    frame: a race there is reported at the line of the forward op the backward op belongs to.
    Here a thread that runs `torch.autograd.backward` itself stands in for such a thread."""
    with Sanitizer(device=device) as sanitizer:
        weight = torch.ones(N, device="cuda", requires_grad=True)
        loss = (weight * weight).sum()
        forward_line = sys._getframe().f_lineno - 1
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            weight.data.add_(1)  # the saved weight, written on a side stream
        worker = threading.Thread(target=torch.autograd.backward, args=(loss,))
        worker.start()
        worker.join()
        torch.cuda.synchronize()
    races = [error for error in sanitizer.errors if error.kind != kinds.WAIT_UNRECORDED_EVENT]
    assert races, "the backward op reads the saved weight after the side stream wrote it"
    frames = [innermost_user_frame(error.current.stack) for error in races]
    assert all(frame is not None and frame.lineno == forward_line for frame in frames), frames


# -- the torch internals -----------------------------------------------------------------------


def test_a_torch_lacking_an_internal_fails_enable_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delattr(torch._C, "_current_autograd_node")
    monkeypatch.delattr(_gpu_trace, "EventWaitCallbacks")
    sanitizer = Sanitizer(device="emulated")
    with pytest.raises(RuntimeError) as raised:
        sanitizer.enable()
    message = str(raised.value)
    assert "torch._C._current_autograd_node" in message and "torch.cuda._gpu_trace.EventWaitCallbacks" in message
    assert not sanitizer.enabled and not emulation.is_active()


def test_this_torch_has_every_internal():
    assert torch_internals.missing(real_cuda=hasattr(torch._C, "_activate_gpu_trace")) == []


def test_a_torch_cuda_method_reaching_the_torch_one_is_reported_once(monkeypatch: pytest.MonkeyPatch):
    """Where torch.cuda.Event subclasses torch.Event and its query() reaches torch.Event.query
    through super(), both are wrapped: the poll is one engine event, not two."""
    from csan_lint.runtime.emulation import streams

    monkeypatch.setattr(streams.Event, "query", lambda event: streams.GenericEvent.query(event))
    out = io.StringIO()
    with emulation.emulated(), Sanitizer(device="emulated", trace_out=out) as sanitizer:
        event = torch.cuda.Event()
        event.record()
        torch.cuda.synchronize()
        assert event.query()
        sanitizer.sink.flush()
    assert out.getvalue().count('"event":"event_queried"') == 1
