"""The device-generic and low-level spellings of the emulated device's API, and the gaps real
GPU test suites hit: each works as on a CUDA build and feeds the same trace events."""

from __future__ import annotations

import ctypes
import warnings

import pytest
import torch

from csan_lint.runtime import emulation

pytestmark = pytest.mark.usefixtures("device")


def test_torch_stream_and_event_for_cuda_are_generic_ones_as_on_a_cuda_build(trace):
    stream = torch.Stream("cuda")
    event = torch.Event("cuda", enable_timing=True)
    # A CUDA build makes a torch.Stream / torch.Event, not their torch.cuda subclasses: a
    # sanitizer that wraps only torch.cuda's methods misses these.
    assert isinstance(stream, torch.Stream) and not isinstance(stream, torch.cuda.Stream)
    assert isinstance(event, torch.Event) and not isinstance(event, torch.cuda.Event)
    for method in ("record", "wait", "query", "synchronize"):  # a wrapper of one is not of the other
        assert method in vars(torch.Event) and method in vars(torch.cuda.Event)
    for method in ("query", "synchronize", "wait_event"):
        assert method in vars(torch.Stream) and method in vars(torch.cuda.Stream)
    with stream:
        assert torch.cuda.current_stream().cuda_stream == stream.stream_id
        event.record()
    event.wait(torch.cuda.current_stream())
    assert ("event_recorded", event.event_id, stream.stream_id) in trace
    assert ("event_waited", event.event_id, 0) in trace
    assert isinstance(torch.Stream("cpu"), torch.Stream)  # other devices: torch's own


def test_torch_stream_and_event_are_bases_of_the_cuda_types_as_in_a_cuda_build():
    stream, event = torch.cuda.Stream(), torch.cuda.Event()
    assert torch.Stream in type(stream).mro() and issubclass(type(stream), torch.Stream)
    assert torch.Event in type(event).mro() and issubclass(type(event), torch.Event)
    assert not isinstance(torch.Stream("cpu"), torch.cuda.Stream)  # the subclasses check as usual
    assert not isinstance(torch.Event("cpu"), torch.cuda.Event)
    assert isinstance(torch.Event("cpu"), torch.Event)
    view = torch.cuda.Stream(stream_id=stream.stream_id, device_index=0, device_type=stream.device_type)
    assert view == stream and view.priority == stream.priority


def test_torch_accelerator_drives_the_emulated_device(trace):
    assert torch.accelerator.is_available() and torch.accelerator.device_count() == 1
    assert torch.accelerator.current_accelerator().type == "cuda"
    side = torch.cuda.Stream()
    torch.accelerator.set_stream(side)
    assert torch.accelerator.current_stream() == side == torch.cuda.current_stream()
    torch.accelerator.set_stream(torch.cuda.default_stream())
    torch.accelerator.synchronize()
    assert trace.names()[-1] == "device_synchronized"
    x = torch.ones(256, device="cuda")
    assert torch.accelerator.memory_allocated() == x.nbytes


def test_generic_queries_and_waits_follow_the_emulated_policy(trace):
    stream, event = torch.Stream("cuda"), torch.Event("cuda")
    with stream:
        torch.ones(8, device="cuda")
    assert stream.query() is False and stream.query() is True  # pending once, then done
    with stream:
        torch.ones(8, device="cuda")
        event.record()
    assert event.query() is False and event.query() is True
    event.wait(torch.accelerator.current_stream())
    stream.wait_event(event)
    assert trace.of("event_waited") == [(event.event_id, 0), (event.event_id, stream.stream_id)]


def test_the_raw_set_stream_of_torchs_test_base_selects_the_stream():
    side = torch.cuda.Stream()
    torch._C._cuda_setStream(stream_id=side.stream_id, device_index=0, device_type=side.device_type)
    assert torch.cuda.current_stream() == side
    torch.cuda.set_stream(torch.cuda.default_stream())
    assert torch.cuda.current_stream().cuda_stream == 0


def test_version_allocator_sleep_and_host_cache_answer_as_a_cuda_build():
    assert torch.version.cuda and torch.cuda.get_allocator_backend() == "native"
    torch.cuda._sleep(1000)
    torch._C._host_emptyCache()


def test_cudart_host_registration_pins_memory():
    t = torch.ones(20)
    assert not t.is_pinned()
    cudart = torch.cuda.cudart()
    assert cudart.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0) == 0
    assert t.is_pinned()
    assert cudart.cudaHostUnregister(t.data_ptr()) == 0
    assert not t.is_pinned()
    assert cudart.cudaProfilerStart() == 0


def test_cudart_creates_blocking_streams_an_external_stream_wraps():
    cudart = torch.cuda.cudart()
    first, second = ctypes.c_void_p(), ctypes.c_void_p()
    assert cudart.cudaStreamCreate(ctypes.addressof(first)) == 0
    assert cudart.cudaStreamCreate(ctypes.addressof(second)) == 0
    pool_stream = torch.cuda.Stream()
    assert len({first.value, second.value, pool_stream.cuda_stream, 0}) == 4
    wrapped = torch.cuda.ExternalStream(first.value)
    assert isinstance(wrapped, torch.cuda.ExternalStream) and isinstance(wrapped, torch.cuda.Stream)
    assert wrapped.cuda_stream == first.value
    assert emulation.is_blocking_stream(first.value) and not emulation.is_blocking_stream(pool_stream.cuda_stream)
    assert cudart.cudaStreamDestroy(first.value) == 0
    assert cudart.cudaStreamDestroy(first.value) == 1  # destroyed already: cudaErrorInvalidValue
    assert not emulation.is_blocking_stream(first.value)


def test_legacy_tensor_types_make_and_recognize_device_tensors():
    x = torch.cuda.FloatTensor([1, 2])
    y = torch.cuda.LongTensor(2, 3)
    assert x.is_cuda and x.dtype == torch.float32 and x.tolist() == [1.0, 2.0]
    assert y.is_cuda and y.shape == (2, 3) and y.dtype == torch.int64
    assert isinstance(x, torch.cuda.FloatTensor) and not isinstance(x, torch.cuda.LongTensor)
    assert not isinstance(torch.ones(2), torch.cuda.FloatTensor)
    assert x.type() == "torch.cuda.FloatTensor"


def test_legacy_storage_types_and_storages_made_for_cuda_are_device_memory(trace):
    storage = torch.cuda.IntStorage(10).fill_(10)
    assert storage.device == torch.device("cuda", 0) and storage.tolist() == [10] * 10
    assert ("allocated", storage.untyped().data_ptr()) in trace
    assert torch.UntypedStorage(8, device="cuda").device.type == "cuda"
    assert torch.UntypedStorage(8).device.type == "cpu"
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.UntypedStorage(8, device="cuda:1")


def test_an_empty_capture_warns_as_cuda_does():
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.stream(torch.cuda.Stream()):
            graph.capture_begin()
            graph.capture_end()
    assert any("The CUDA Graph is empty" in str(w.message) for w in caught)


def test_graph_pools_are_shared_handles():
    handle = torch.cuda.graph_pool_handle()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    x = torch.zeros(4, device="cuda")
    with torch.cuda.graph(first, pool=handle):
        x.add_(1)
    with torch.cuda.graph(second, pool=first.pool()):
        x.mul_(2)
    assert first.pool() == second.pool() == handle
    first.replay()
    second.replay()
    assert x.tolist() == [2.0] * 4


def test_pinned_blocks_are_reused_once_free_and_not_while_a_copy_is_pending():
    t = torch.ones(4).pin_memory()
    ptr = t.data_ptr()
    del t
    t = torch.ones(4).pin_memory()
    assert t.data_ptr() == ptr and t.is_pinned()  # the freed block came back
    on_device = torch.zeros(4, device="cuda")
    on_device.copy_(t, non_blocking=True)
    del t
    busy = torch.ones(4).pin_memory()
    assert busy.data_ptr() != ptr  # the copy may still be reading the old block
    torch.cuda.synchronize()
    del busy
    assert torch.ones(4).pin_memory().data_ptr() == ptr
    assert on_device.tolist() == [1.0] * 4
