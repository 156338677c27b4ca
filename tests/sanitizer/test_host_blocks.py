"""Pinned host blocks on the emulated device end with their storage: a block's pending copies
are forgotten when it dies, so a new block at its bytes (the CPU allocator hands addresses out
again at will) starts clean, and a pinned write-after-read is reported the same way every run."""

from __future__ import annotations

import collections

import torch

from csan_lint.runtime import kinds, sanitize


def pinned_round(device_data: torch.Tensor, side: torch.cuda.Stream, racy: bool) -> torch.Tensor:
    """Drops non-blocking downloads with their copies pending (their blocks die, their
    addresses come back), then uploads a pinned buffer and overwrites it on the host: before
    the upload is done when `racy`, after a sync otherwise."""
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for n in (700, 64, 300, 1024):
            scratch = device_data[:n].to("cpu", non_blocking=True)
            view = scratch[3:]  # the block's first access need not be at its base
            del scratch, view
    source = torch.ones(256).pin_memory()
    staged = torch.empty(512, pin_memory=True)
    staged.copy_(device_data[:512], non_blocking=True)
    uploaded = source.to("cuda", non_blocking=True)
    if not racy:
        torch.cuda.current_stream().synchronize()
    source.fill_(2.0)  # overwrites what the upload may still be reading
    staged[1:].add_(1)  # overwrites what the download may still be writing
    side.synchronize()
    return uploaded


def test_a_pinned_write_after_read_is_reported_the_same_way_in_every_run():
    with sanitize(device="emulated") as sanitizer:
        device_data = torch.arange(4096.0, device="cuda")
        side = torch.cuda.Stream()
        outcomes: dict[bool, collections.Counter] = {}
        for racy in (True, False):
            outcomes[racy] = collections.Counter()
            for _ in range(20):
                sanitizer.tracker.reported.clear()  # each run reports its races again, as each test does
                before = len(sanitizer.errors)
                pinned_round(device_data, side, racy)
                outcomes[racy][tuple(sorted(e.kind for e in sanitizer.errors[before:]))] += 1
    assert outcomes == {
        True: {(kinds.HOST_WRITE_PENDING, kinds.HOST_WRITE_PENDING): 20},
        False: {(): 20},
    }


def test_a_dead_pinned_block_leaves_no_state_and_a_live_one_is_watched():
    with sanitize(device="emulated") as sanitizer:
        data = torch.arange(64.0, device="cuda")
        host = data.to("cpu", non_blocking=True)
        assert sanitizer.tracker.stats()["allocations"] == 2  # the device block and the pinned one
        host.add_(1)  # before a sync: races the download
        assert [e.kind for e in sanitizer.errors] == [kinds.HOST_WRITE_PENDING]
        del host
        assert sanitizer.tracker.stats()["allocations"] == 1
        assert sanitizer.mode.host_blocks == {}


def test_a_pinned_block_handed_out_again_is_a_new_block_to_the_engine():
    with sanitize(device="emulated") as sanitizer:
        tracker = sanitizer.tracker
        seen = []
        allocated, freed = tracker.allocated, tracker.freed

        def on_allocated(ptr, size, stream, stack=None):
            seen.append(("allocated", ptr, stream))
            allocated(ptr, size, stream, stack=stack)

        def on_freed(ptr, stack=None):
            seen.append(("freed", ptr))
            freed(ptr, stack=stack)

        tracker.allocated, tracker.freed = on_allocated, on_freed
        first = torch.ones(64).pin_memory()
        ptr = first.data_ptr()
        on_device = first.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        del first  # its copy is done: the pool may hand the block out again
        second = torch.full((64,), 2.0).pin_memory()
        assert second.data_ptr() == ptr
        on_device.copy_(second, non_blocking=True)
        torch.cuda.synchronize()
    host_events = [event for event in seen if event[1] == ptr]
    assert host_events == [("allocated", ptr, None), ("freed", ptr), ("allocated", ptr, None)]
    assert on_device.tolist() == [2.0] * 64
    assert sanitizer.errors == [] and sanitizer.internal_errors == []
