"""Streams, events and syncs of the emulated device, and the `_gpu_trace` callbacks they fire."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

pytestmark = pytest.mark.usefixtures("device")


def test_stream_pool_hands_out_32_streams_per_priority_round_robin():
    streams = [torch.cuda.Stream() for _ in range(33)]
    handles = [s.cuda_stream for s in streams]
    assert len(set(handles[:32])) == 32
    assert 0 not in handles
    assert streams[32] == streams[0] and handles[32] == handles[0]
    assert streams[1] != streams[0]
    high = torch.cuda.Stream(priority=-1)
    assert high.cuda_stream not in handles
    assert high.priority == -1 and streams[0].priority == 0
    # Beyond the device's range the priority is clamped to the nearest level.
    assert torch.cuda.Stream(priority=-100).priority == torch.cuda.Stream(priority=-3).priority


def test_stream_is_a_torch_stream_with_one_handle():
    s = torch.cuda.Stream()
    assert isinstance(s, torch.cuda.Stream) and isinstance(s, torch.Stream)
    assert s.stream_id == s.cuda_stream
    assert s.device == torch.device("cuda", 0)
    same = torch.cuda.Stream(stream_id=s.stream_id, device_index=0, device_type=1)
    assert same == s and hash(same) == hash(s)
    assert s.query() is True


def test_current_stream_follows_stream_contexts_and_set_stream():
    default = torch.cuda.default_stream()
    assert default.cuda_stream == 0
    assert torch.cuda.current_stream() == default
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() == side
        with torch.cuda.StreamContext(None):
            assert torch.cuda.current_stream() == side
    assert torch.cuda.current_stream() == default
    with side:
        assert torch.cuda.current_stream() == side
    torch.cuda.set_stream(side)
    assert torch.cuda.current_stream() == side
    torch.cuda.set_stream(default)
    assert torch.cuda.current_stream() == default


def test_current_stream_is_per_thread_and_threads_get_device_tensors():
    side = torch.cuda.Stream()
    seen = {}
    barrier = threading.Barrier(2)

    def worker(name, stream):
        with torch.cuda.stream(stream):
            barrier.wait()
            x = torch.ones(2, device="cuda") * 2
            seen[name] = (torch.cuda.current_stream().cuda_stream, x.device, x.sum().item())
            barrier.wait()

    threads = [
        threading.Thread(target=worker, args=("side", side)),
        threading.Thread(target=worker, args=("default", None)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen["side"] == (side.cuda_stream, torch.device("cuda", 0), 4.0)
    assert seen["default"] == (0, torch.device("cuda", 0), 4.0)
    assert torch.cuda.current_stream().cuda_stream == 0


def test_events_are_created_on_first_record_and_time_in_milliseconds():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    assert start.cuda_event == 0
    assert "uninitialized" in repr(start)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        start.elapsed_time(end)
    start.record()
    end.record()
    end.synchronize()
    assert start.cuda_event != 0 and start.cuda_event != end.cuda_event
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    untimed = torch.cuda.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed.elapsed_time(end)


def test_stream_creation_fires_once_for_the_whole_pool(trace):
    torch.cuda.Stream()
    torch.cuda.Stream()
    created = trace.of("stream_created")
    assert len(created) == 32 * 4
    assert len(set(created)) == len(created)
    assert (torch.cuda.Stream().cuda_stream,) in created


def test_callbacks_fire_in_order_with_handles_and_pointers(trace):
    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(side)  # csan-lint: ignore[CSL201] (a no-op record: the test wants its callback)
    event = side.record_event()
    event.synchronize()
    side.synchronize()
    value = y.sum().item()
    torch.cuda.synchronize()
    x_ptr, y_ptr = x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()
    del x, y
    gc.collect()
    handle = side.cuda_stream
    events = [entry for entry in trace if entry[0] not in ("stream_created", "allocated", "freed")]
    first, second, third = (entry[1] for entry in events if entry[0] == "event_created")
    assert events == [
        ("event_created", first),
        ("event_recorded", first, 0),
        ("event_waited", first, handle),
        ("event_deleted", first),  # wait_stream's temporary event dies at once
        ("event_created", second),
        ("event_recorded", second, handle),
        ("event_waited", second, 0),
        ("event_deleted", second),
        ("event_created", third),
        ("event_recorded", third, handle),
        ("event_synchronized", third),
        ("stream_synchronized", handle),
        ("stream_synchronized", 0),  # .item(): a blocking device-to-host copy
        ("device_synchronized",),
    ]
    assert value == 8.0
    assert (x_ptr,) in trace.of("allocated") and (y_ptr,) in trace.of("allocated")
    assert (x_ptr,) in trace.of("freed") and (y_ptr,) in trace.of("freed")
    del event
    assert trace[-1] == ("event_deleted", third)


def test_free_fires_when_the_last_view_dies(trace):
    x = torch.empty(8, device="cuda")
    ptr = x.untyped_storage().data_ptr()
    view = x[2:]
    del x
    assert (ptr,) not in trace.of("freed")
    del view
    assert trace.of("freed").count((ptr,)) == 1
    assert trace.of("allocated").count((ptr,)) == 1


def test_allocation_precedes_the_sync_of_a_blocking_copy(trace):
    host = torch.arange(3.0)
    x = host.cuda()
    assert trace.names(without=("stream_created",))[-2:] == ["allocated", "stream_synchronized"]
    assert trace[-2] == ("allocated", x.untyped_storage().data_ptr())
    before = len(trace)
    pinned = host.pin_memory()
    pinned.to("cuda", non_blocking=True)
    assert [entry[0] for entry in trace[before:]] == ["allocated", "freed"]  # no sync


def test_a_storage_moved_to_the_device_is_one_blocking_copy_like_a_tensor(trace):
    # torch's storage `_to`: a new device storage and one `copy_` (one memcpy_and_sync).
    host = torch.arange(3.0).untyped_storage()
    moved = host.cuda()
    assert trace.names() == ["allocated", "stream_synchronized"]
    assert trace[-2] == ("allocated", moved.data_ptr())


def test_waiting_on_a_never_recorded_event_fires_nothing(trace):
    event = torch.cuda.Event()
    torch.cuda.current_stream().wait_event(event)
    event.synchronize()
    assert trace.names() == []


def test_empty_tensors_get_no_allocation(trace):
    torch.empty(0, device="cuda")
    assert trace.of("allocated") == []


def test_growing_a_device_tensor_moves_it_to_a_new_block(trace):
    x = torch.empty(4, device="cuda")
    old = x.untyped_storage().data_ptr()
    x.resize_(1 << 16)
    new = x.untyped_storage().data_ptr()
    assert new != old and x.is_cuda
    assert trace[-2:] == [("allocated", new), ("freed", old)]
    x.resize_(2)  # shrinking keeps the block
    assert trace[-1] == ("freed", old)
    del x
    assert trace[-1] == ("freed", new)


def test_record_stream_reaches_a_mode_above_with_the_stream_handle():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.record_stream.default:
                seen.append((args[0].data_ptr(), args[1].stream_id))
            return func(*args, **(kwargs or {}))

    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    with Recorder():
        x.record_stream(side)
    assert seen == [(x.data_ptr(), side.cuda_stream)]
    with pytest.raises(RuntimeError):
        torch.ones(1).record_stream(side)  # a host tensor has no allocator stream, as on CUDA


def test_current_stream_answers_are_cheap_and_equal():
    from csan_lint.runtime import emulation

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert emulation.current_stream_handle() == side.cuda_stream
        assert torch.cuda.current_stream() == side
    assert emulation.current_stream_handle() == 0
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


def test_tensor_literal_on_the_device_is_a_blocking_copy_a_mode_sees(trace):
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append((func, (kwargs or {}).get("device")))
            return func(*args, **(kwargs or {}))

    with Recorder():
        x = torch.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    assert (torch.ops.aten._to_copy.default, torch.device("cuda", 0)) in ops
    assert x.is_leaf and x.requires_grad and x.is_cuda
    assert trace[-2:] == [("allocated", x.untyped_storage().data_ptr()), ("stream_synchronized", 0)]
