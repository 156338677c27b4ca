"""CUDA graph capture and replay on the emulated device."""

from __future__ import annotations

import threading

import pytest
import torch

pytestmark = pytest.mark.usefixtures("device")


def test_capture_on_the_default_stream_raises_like_cuda():
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="CUDA graphs must be captured on a non-default stream"):
        graph.capture_begin()
    assert not torch.cuda.is_current_stream_capturing()


def test_capture_must_end_on_the_stream_it_began_on():
    graph = torch.cuda.CUDAGraph()
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(side):
        graph.capture_begin()
        assert torch.cuda.is_current_stream_capturing()
    with torch.cuda.stream(other):
        with pytest.raises(RuntimeError, match="Capture must end on the same stream it began on"):
            graph.capture_end()
    with torch.cuda.stream(side):
        graph.capture_end()
        assert not torch.cuda.is_current_stream_capturing()


def test_replay_reruns_the_captured_work_on_the_same_memory():
    static_in = torch.zeros(3, device="cuda")
    weight = torch.full((3,), 2.0, device="cuda")
    counter = torch.zeros(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * weight + 1
        counter.add_(1)
    # As on CUDA, in-place work waits for a replay.
    assert counter.item() == 0.0
    static_in.copy_(torch.tensor([1.0, 2.0, 3.0], device="cuda"))
    graph.replay()
    assert static_out.tolist() == [3.0, 5.0, 7.0]
    static_in.fill_(10.0)
    graph.replay()
    assert static_out.tolist() == [21.0, 21.0, 21.0]
    assert counter.item() == 2.0
    assert static_out.device == torch.device("cuda", 0)


def test_copies_into_static_inputs_during_capture_happen_at_replay():
    source = torch.ones(2, device="cuda")
    static = torch.zeros(2, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static.copy_(source)
        out = static.sum()
    assert static.tolist() == [0.0, 0.0]
    source.fill_(4.0)
    graph.replay()
    assert static.tolist() == [4.0, 4.0] and out.item() == 8.0


def test_random_numbers_are_drawn_at_replay_only():
    """An op with a fresh result runs during capture too; like CUDA, that run draws nothing
    from the device's generator, so replays continue the eager sequence."""
    a = torch.randn(1000, device="cuda")
    torch.cuda.manual_seed(5)
    expected = [torch.nn.functional.rrelu(a, training=True)]
    expected.append(torch.nn.functional.rrelu(expected[0], training=True))
    torch.cuda.manual_seed(5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.nn.functional.rrelu(a, training=True)
    graph.replay()
    assert torch.equal(out, expected[0])
    assert torch.equal(torch.nn.functional.rrelu(out, training=True), expected[1])


def test_module_forward_replays():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).cuda()
    static_x = torch.randn(3, 4, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(static_x)  # warm-up on a side stream, as the CUDA graphs docs do
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = model(static_x)
    fresh = torch.randn(3, 4, device="cuda")
    static_x.copy_(fresh)
    graph.replay()
    with torch.no_grad():
        assert torch.allclose(static_y.cpu(), model(fresh).cpu())


def test_syncs_are_forbidden_on_a_capturing_stream():
    graph = torch.cuda.CUDAGraph()
    x = torch.ones(2, device="cuda")
    with torch.cuda.graph(graph):
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            x.sum().item()
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            torch.cuda.synchronize()
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            torch.cuda.current_stream().synchronize()


def test_a_stream_that_waits_on_the_capture_joins_it():
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    x = torch.zeros(2, device="cuda")
    with torch.cuda.graph(graph):
        capture = torch.cuda.current_stream()
        side.wait_stream(capture)
        with torch.cuda.stream(side):
            assert torch.cuda.is_current_stream_capturing()
            x.add_(1)
        capture.wait_stream(side)
    assert not torch.cuda.is_current_stream_capturing()
    with torch.cuda.stream(side):
        assert not torch.cuda.is_current_stream_capturing()
    assert x.tolist() == [0.0, 0.0]
    graph.replay()
    assert x.tolist() == [1.0, 1.0]


def test_replay_before_capture_and_second_capture_raise():
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()
    with torch.cuda.graph(graph):
        torch.ones(1, device="cuda") + 1
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with torch.cuda.graph(graph):
            pass
    graph.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()


def test_a_fork_not_joined_back_fails_the_capture_like_cuda():
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    x = torch.ones(2, device="cuda")
    with pytest.raises(RuntimeError, match="capturing stream has unjoined work"):
        with torch.cuda.graph(graph):
            capture = torch.cuda.current_stream()
            side.wait_stream(capture)
            with torch.cuda.stream(side):
                x.mul_(2)
    assert not torch.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()


def test_a_join_before_the_forked_streams_last_work_is_not_enough():
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    x = torch.ones(2, device="cuda")
    with pytest.raises(RuntimeError, match="unjoined work"):
        with torch.cuda.graph(graph):
            capture = torch.cuda.current_stream()
            side.wait_stream(capture)
            joined = side.record_event()
            with torch.cuda.stream(side):
                x.mul_(2)
            capture.wait_event(joined)


def test_a_relaxed_capture_lets_another_thread_sync_the_device():
    graph = torch.cuda.CUDAGraph()
    outcome = []
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        worker = threading.Thread(target=lambda: outcome.append(torch.cuda.synchronize()))
        worker.start()
        worker.join()
    assert outcome == [None]
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            torch.cuda.synchronize()


def test_graphed_callables_capture_forward_and_backward():
    module = torch.nn.Linear(4, 4).cuda()
    sample = torch.randn(2, 4, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(module, (sample,))
    x = torch.randn(2, 4, device="cuda", requires_grad=True)
    graphed(x).sum().backward()
    assert x.grad is not None and module.weight.grad is not None
    expected = torch.ones(2, 4, device="cuda") @ module.weight
    assert torch.allclose(x.grad, expected)
