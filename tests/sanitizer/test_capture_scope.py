"""Graph capture on the emulated device end to end: a fork made during capture orders
nothing live, and launches outside a thread-local or relaxed capture are live work."""

from __future__ import annotations

import pytest
import torch

from csan_lint.runtime import kinds, sanitize


def test_a_stream_forked_during_capture_is_not_ordered_after_earlier_work():
    with sanitize(device="emulated") as sanitizer:
        capture, side = torch.cuda.Stream(), torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        static = torch.zeros(8, device="cuda")
        y = torch.ones(8, device="cuda")
        torch.cuda.synchronize()
        y.add_(1)  # default stream, after the sync: only the capture stream waits for it
        capture.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture):
            graph.capture_begin()
            side.wait_stream(capture)  # a graph edge, not a live one
            with torch.cuda.stream(side):
                static.add_(1)
            capture.wait_stream(side)
            graph.capture_end()
        with torch.cuda.stream(side):
            y.sum()  # live on side: nothing orders it after y.add_
    assert [e.kind for e in sanitizer.errors] == [kinds.READ_AFTER_WRITE]


@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_live_work_on_another_stream_during_a_lenient_capture_is_no_fork(mode):
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        other = torch.cuda.Stream()
        other.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            with torch.cuda.stream(other):
                x.mul_(2)  # not in the graph: runs now
            static = torch.zeros(4, device="cuda") + 1
        del static
    assert sanitizer.errors == []


def test_the_same_launch_during_a_global_capture_is_an_unforked_side_stream():
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        other = torch.cuda.Stream()
        other.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with torch.cuda.stream(other):
                x.mul_(2)
    assert [e.kind for e in sanitizer.errors] == [kinds.UNJOINED_CAPTURE_FORK]


def test_live_work_from_another_thread_during_a_global_capture_is_no_fork():
    import threading

    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()

        def worker() -> None:
            other = torch.cuda.Stream()
            with torch.cuda.stream(other):
                x.mul_(2)  # another thread's own stream: not in the graph

        with torch.cuda.graph(graph):
            static = torch.zeros(4, device="cuda") + 1
            thread = threading.Thread(target=worker)
            thread.start()
            thread.join()
        del static
    assert sanitizer.errors == []
