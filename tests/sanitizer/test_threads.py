"""The engine is entered from several threads and from storage deaths (free callbacks, the end
of a pinned host block) that may come in the middle of an engine call, from a garbage
collection there: one lock serializes the threads, and a death inside a call waits for it."""

from __future__ import annotations

import gc
import sys
import threading

import torch

from csan_lint.runtime import sanitize


def test_a_block_freed_by_a_collection_inside_an_engine_call_is_freed_after_the_call():
    gc.disable()  # the test's own collection, inside the launch, is the only one
    try:
        with sanitize(device="emulated") as sanitizer:
            tracker = sanitizer.tracker
            launching = []  # one entry per launch running in the engine
            frees_inside_a_launch = []
            launched, freed = tracker.kernel_launched, tracker.freed

            def kernel_launched(*args, **kwargs):
                launching.append(True)
                try:
                    gc.collect()  # as a collection set off by the engine's own allocations would
                    launched(*args, **kwargs)
                finally:
                    launching.pop()

            def on_freed(ptr, *args, **kwargs):
                frees_inside_a_launch.append((ptr, bool(launching)))
                freed(ptr, *args, **kwargs)

            tracker.kernel_launched, tracker.freed = kernel_launched, on_freed
            cycle = [torch.ones(4, device="cuda")]
            cycle.append(cycle)  # only the cyclic collector frees it
            cycle[0].add_(1)
            ptr = cycle[0].data_ptr()
            del cycle
            torch.ones(4, device="cuda").mul_(2)
        assert (ptr, False) in frees_inside_a_launch
        assert all(not inside for _, inside in frees_inside_a_launch)
        assert sanitizer.internal_errors == []
    finally:
        gc.enable()


def test_threads_copying_through_pinned_blocks_and_launching_leave_the_engine_consistent():
    wrong = []  # copies that came back with other values, from every thread

    def work() -> None:
        for _ in range(40):
            pinned = torch.randn(64).pin_memory()
            on_device = pinned.to("cuda", non_blocking=True)
            cycle = [on_device * 2]
            cycle.append(cycle)  # device garbage for the cyclic collector, run at any point
            back = torch.empty(64, pin_memory=True)
            back.copy_(cycle[0], non_blocking=True)
            torch.cuda.current_stream().synchronize()
            if not torch.equal(back, pinned * 2):
                wrong.append(back)

    previous = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(20, 2, 2)
    try:
        with sanitize(device="emulated") as sanitizer:
            workers = [threading.Thread(target=work) for _ in range(4)]
            for worker in workers:
                worker.start()
            work()
            for worker in workers:
                worker.join()
    finally:
        sys.setswitchinterval(previous[0])
        gc.set_threshold(*previous[1])
    assert sanitizer.internal_errors == []
    assert wrong == []
    assert [error.kind for error in sanitizer.errors] == []
