"""What the engine does beyond CSAN: byte ranges, free-in-use, host accesses, unrecorded events,
zero-size tensors, every error collected once, graph capture rules, bounded memory."""

from __future__ import annotations

import sys

from csan_lint.runtime import kinds
from csan_lint.runtime.cuda_semantics import MIN_BLOCK_SIZE, SMALL_SIZE, UNRECORDED_EVENT
from csan_lint.runtime.events import DEFAULT_STREAM, HOST, Access
from csan_lint.runtime.reuse import POOL_CAP
from csan_lint.runtime.stacks import capture_stack, resolve
from csan_lint.runtime.tracker import REALLOCATION_OPERATOR, Tracker

S0, S1, S2 = 0, 1001, 1002
BASE = 0x100000


# -- (a) byte ranges within an allocation ------------------------------------------------------


def test_view_at_offset_races_with_its_base():
    t = Tracker()
    t.allocated(BASE, 1024, S0)
    t.kernel_launched(S0, "fill_", [Access(BASE, 1024, True, "self")])
    t.kernel_launched(S1, "mul", [Access(BASE + 512, 256, False, "self")])  # data_ptr != BASE
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]
    assert t.errors[0].allocation.ptr == BASE


def test_disjoint_slices_do_not_race():
    t = Tracker()
    t.allocated(BASE, 1024, S0)
    t.kernel_launched(S1, "fill_", [Access(BASE, 512, True, "self")])
    t.kernel_launched(S2, "zero_", [Access(BASE + 512, 512, True, "self")])
    assert t.errors == []
    # ...but a read of the whole block touches both halves: two unordered writers.
    t.kernel_launched(S0, "sum", [Access(BASE, 1024, False, "self")])
    assert sorted(e.previous.stream for e in t.errors) == [S1, S2]


def test_partial_overlap_races():
    t = Tracker()
    t.allocated(BASE, 1024, S0)
    t.kernel_launched(S1, "fill_", [Access(BASE, 600, True, "self")])
    t.kernel_launched(S2, "fill_", [Access(BASE + 599, 10, True, "self")])
    assert [e.kind for e in t.errors] == [kinds.WRITE_AFTER_WRITE]


def test_whole_write_collapses_intervals():
    t = Tracker()
    t.allocated(BASE, 1024, S0)
    for i in range(8):
        t.kernel_launched(S0, "read", [Access(BASE + 128 * i, 64, False, "self")])
    assert t.stats()["intervals"] > 8
    t.kernel_launched(S0, "fill_", [Access(BASE, 1024, True, "self")])
    assert t.stats()["intervals"] == 1
    assert t.errors == []


def test_access_past_a_known_block_is_clipped_and_unknown_memory_backfilled():
    t = Tracker()
    t.allocated(BASE, 256, S0)
    t.allocated(BASE + 256, 256, S0)
    t.kernel_launched(S1, "fill_", [Access(BASE, 512, True, "self")])  # clipped to the first block
    t.kernel_launched(S2, "fill_", [Access(BASE + 256, 256, True, "self")])
    assert t.errors == []
    t.kernel_launched(S1, "fill_", [Access(0x900000, 64, True, "self")])  # never allocated
    t.kernel_launched(S2, "mul", [Access(0x900000 + 32, 64, False, "self")])  # grows the backfill
    assert [(e.kind, e.allocation.ptr, e.allocation.stream) for e in t.errors] == [
        (kinds.READ_AFTER_WRITE, 0x900000, None)
    ]


# -- (b) free-in-use: judged at the block's reuse ------------------------------------------------


def _side_read_then_free(ordering, reallocate=lambda t: t.allocated(BASE, 256, S0), recorded=None) -> list:
    """A block of S0 read on S1, freed (after `record_stream(recorded)` if given); `ordering`
    runs between the free and the next allocation on S0 (`reallocate`), which may get the block."""
    t = Tracker()
    t.allocated(BASE, 256, S0)
    t.kernel_launched(S0, "fill_", [Access(BASE, 256, True, "self")])
    t.event_recorded(1, S0)
    t.event_waited(1, S1)
    t.kernel_launched(S1, "mul", [Access(BASE, 256, False, "self")])
    if recorded is not None:
        t.stream_recorded(BASE + 16, recorded)
    t.freed(BASE)
    ordering(t)
    reallocate(t)
    return t.errors


def _join(t: Tracker, waiter: int = S0, waited: int = S1, event: int = 2) -> None:
    t.event_recorded(event, waited)
    t.event_waited(event, waiter)


def test_reallocation_before_the_owner_is_ordered_after_the_use_races_the_free():
    t = Tracker()
    t.allocated(BASE, 256, S0, capture_stack())
    t.kernel_launched(S1, "mul", [Access(BASE, 256, False, "self")], capture_stack())
    t.freed(BASE, capture_stack()); free_line = sys._getframe().f_lineno  # noqa: E702  # fmt: skip
    assert t.errors == []  # the free alone races nothing: the block may never be reused
    t.allocated(BASE, 256, S0, capture_stack()); again_line = sys._getframe().f_lineno  # noqa: E702  # fmt: skip
    (error,) = t.errors
    assert (error.kind, error.current.operator, error.previous.stream, error.allocation.stream) == (
        kinds.FREE_IN_USE,
        "free",
        S1,
        S0,
    )
    assert (error.reallocation.stream, error.reallocation.operator) == (S0, REALLOCATION_OPERATOR)
    assert resolve(error.current.stack)[-1].lineno == free_line
    assert resolve(error.reallocation.stack)[-1].lineno == again_line


def test_free_while_side_stream_uses_block():
    errors = _side_read_then_free(lambda t: None)
    assert [(e.kind, e.current.stream, e.current.operator, e.previous.stream) for e in errors] == [
        (kinds.FREE_IN_USE, S0, "free", S1)
    ]


def test_owner_waiting_for_the_user_before_it_allocates_again_is_clean():
    # transformers' offloaded cache: the prefetch stream waits for the default stream after
    # freeing, before its next allocation (`prefetch_stream.wait_stream(default_stream)`).
    assert _side_read_then_free(_join) == []


def test_free_never_followed_by_an_allocation_on_its_stream_is_clean():
    assert _side_read_then_free(lambda t: None, reallocate=lambda t: None) == []
    assert _side_read_then_free(lambda t: None, reallocate=lambda t: t.allocated(BASE, 256, S1)) == []


def test_record_stream_covers_the_free():
    assert _side_read_then_free(lambda t: None, recorded=S1) == []


def test_record_stream_of_another_stream_does_not_cover():
    assert [e.kind for e in _side_read_then_free(lambda t: None, recorded=S2)] == [kinds.FREE_IN_USE]


def test_owner_ordered_after_side_stream_before_the_free_covers_it():
    def join_then_free(t):
        t.allocated(BASE, 256, S0)
        t.kernel_launched(S1, "mul", [Access(BASE, 256, False, "self")])
        _join(t)
        t.freed(BASE)
        t.allocated(BASE, 256, S0)

    t = Tracker()
    join_then_free(t)
    assert t.errors == [] and t.stats()["freed_in_use"] == 0


def test_host_sync_covers_the_free():
    assert _side_read_then_free(lambda t: t.stream_synchronized(S1)) == []
    assert _side_read_then_free(lambda t: t.stream_queried(S1, True)) == []
    assert [e.kind for e in _side_read_then_free(lambda t: t.stream_queried(S1, False))] == [kinds.FREE_IN_USE]


def test_the_pool_may_hand_the_block_to_any_allocation_of_its_stream_it_can_serve():
    # The allocator picks among its stream's cached blocks: the address an allocation gets is not
    # the program's to rely on, so a smaller one elsewhere still races the free.
    elsewhere = BASE + 0x10000
    errors = _side_read_then_free(lambda t: None, reallocate=lambda t: t.allocated(elsewhere, 128, S0))
    assert [e.kind for e in errors] == [kinds.FREE_IN_USE]
    # A larger request, or one from the other pool (large blocks), cannot get it: the block stays
    # pending, and the owner's later wait retires it.
    t = Tracker()
    t.allocated(BASE, 256, S0)
    t.kernel_launched(S1, "mul", [Access(BASE, 256, False, "self")])
    t.freed(BASE)
    t.allocated(elsewhere, 1024, S0)  # over the 512 bytes the 256-byte request was served with
    t.allocated(elsewhere + 0x1000, SMALL_SIZE + 1, S0)
    assert t.errors == [] and t.stats()["freed_in_use"] == 1
    _join(t)
    t.allocated(elsewhere + 0x200000, 64, S0)
    assert t.errors == [] and t.stats()["freed_in_use"] == 0


def test_a_freed_block_handed_to_another_stream_races_its_unordered_use():
    # An allocator (model) that hands the bytes to another stream: that stream's work must be
    # ordered after the use too; the using stream's own is.
    for ptr, size in ((BASE, 64), (BASE + 128, 512), (BASE - 64, 65)):  # any byte of the block
        errors = _side_read_then_free(lambda t: None, reallocate=lambda t, at=(ptr, size): t.allocated(*at, S2))
        assert [e.kind for e in errors] == [kinds.FREE_IN_USE]
    assert _side_read_then_free(lambda t: None, reallocate=lambda t: t.allocated(BASE + 256, 64, S2)) == []


def test_a_graph_pool_or_pinned_allocation_at_the_bytes_is_no_reuse():
    def capture(t):
        t.capture_began(S2)
        t.allocated(BASE, 256, S2)
        t.capture_ended(S2)

    assert _side_read_then_free(lambda t: None, reallocate=capture) == []
    assert _side_read_then_free(lambda t: None, reallocate=lambda t: t.allocated(BASE, 256, None)) == []


def test_a_blocking_owner_is_ordered_by_the_legacy_default_stream():
    t = Tracker()
    t.stream_created(S2, blocking=True)
    t.allocated(BASE, 256, S2)
    t.kernel_launched(S1, "mul", [Access(BASE, 256, False, "self")])
    t.freed(BASE)
    _join(t, DEFAULT_STREAM, S1)  # the default stream waits for S1: S2's next work does too
    t.allocated(BASE, 256, S2)
    assert t.errors == []


def test_free_releases_shadow_state_and_block_reuse_is_new():
    t = Tracker()
    t.allocated(BASE, 256, S0)
    t.kernel_launched(S1, "fill_", [Access(BASE, 256, True, "self")])
    t.stream_recorded(BASE, S1)
    t.freed(BASE)
    assert t.stats()["allocations"] == 0 and t.stats()["freed_in_use"] == 0
    t.allocated(BASE, 256, S0)
    t.kernel_launched(S0, "fill_", [Access(BASE, 256, True, "self")])
    assert t.errors == []  # the allocator waited for S1 (record_stream)


def test_freed_blocks_awaiting_reuse_stay_bounded():
    t = Tracker()
    count = 10 * POOL_CAP
    size = [MIN_BLOCK_SIZE * (i + 1) for i in range(count)]  # each rounds above the last: no reuse
    for i in range(count):
        ptr = BASE + SMALL_SIZE * i
        t.allocated(ptr, size[i], S0)
        t.kernel_launched(S1, "mul", [Access(ptr, size[i], False, "self")])
        t.freed(ptr)
    assert t.stats()["freed_in_use"] == POOL_CAP
    assert t.errors == []
    t.allocated(BASE + SMALL_SIZE * (count - 1), size[-1], S0)  # the newest is still known
    assert [(e.kind, e.allocation.size) for e in t.errors] == [(kinds.FREE_IN_USE, size[-1])]


# -- (c) host accesses --------------------------------------------------------------------------


def _d2h_copy(t: Tracker) -> None:
    t.kernel_launched(S1, "copy_", [Access(BASE, 64, True, "self")])  # non_blocking into pinned memory


def test_host_read_of_pending_copy_destination():
    t = Tracker()
    _d2h_copy(t)
    t.host_accessed(BASE, 64, False, "tolist")
    assert [(e.kind, e.current.stream, e.previous.stream) for e in t.errors] == [(kinds.HOST_READ_PENDING, HOST, S1)]


def test_host_read_after_sync_or_event_query_is_clean():
    for ordering in (
        lambda t: t.stream_synchronized(S1),
        lambda t: t.device_synchronized(),
        lambda t: (t.event_recorded(3, S1), t.event_synchronized(3)),
        lambda t: (t.event_recorded(3, S1), t.event_queried(3, True)),
    ):
        t = Tracker()
        _d2h_copy(t)
        ordering(t)
        t.host_accessed(BASE, 64, False, "tolist")
        assert t.errors == []


def test_event_query_false_orders_nothing():
    t = Tracker()
    _d2h_copy(t)
    t.event_recorded(3, S1)
    t.event_queried(3, False)
    t.host_accessed(BASE, 64, False, "tolist")
    assert [e.kind for e in t.errors] == [kinds.HOST_READ_PENDING]


def test_host_write_of_pending_copy_source():
    t = Tracker()
    t.kernel_launched(S1, "copy_", [Access(BASE, 64, False, "src")])  # non_blocking from pinned memory
    t.host_accessed(BASE + 8, 8, True, "fill_")
    assert [e.kind for e in t.errors] == [kinds.HOST_WRITE_PENDING]


def test_launch_after_host_write_is_ordered():
    t = Tracker()
    t.host_accessed(BASE, 64, True, "fill_")
    t.kernel_launched(S1, "copy_", [Access(BASE, 64, False, "src")])
    t.kernel_launched(S2, "copy_", [Access(BASE, 64, True, "self")])  # S1 vs S2 still races
    assert [e.kind for e in t.errors] == [kinds.WRITE_AFTER_READ]


def test_pinned_block_without_owner_stream():
    t = Tracker()
    t.allocated(BASE, 256, None)
    t.kernel_launched(S1, "copy_", [Access(BASE + 64, 64, True, "self")])
    t.host_accessed(BASE + 96, 8, False, "item")  # inside the pending copy's bytes
    t.host_accessed(BASE, 64, False, "item")  # outside them
    assert [(e.kind, e.allocation.ptr, e.allocation.stream) for e in t.errors] == [
        (kinds.HOST_READ_PENDING, BASE, None)
    ]
    t.freed(BASE)  # the host allocator waits for the copy itself: no free-in-use
    assert len(t.errors) == 1 and t.stats()["allocations"] == 0


# -- (d) events never recorded ------------------------------------------------------------------


def test_wait_on_unrecorded_event_orders_nothing_and_warns():
    t = Tracker()
    t.kernel_launched(S1, "fill_", [Access(BASE, 64, True, "self")])
    t.event_created(7)
    t.event_waited(7, S2)
    t.kernel_launched(S2, "mul", [Access(BASE, 64, False, "self")])
    assert [(e.kind, e.severity) for e in t.errors] == [
        (kinds.WAIT_UNRECORDED_EVENT, "warning"),
        (kinds.READ_AFTER_WRITE, "error"),
    ]
    warning = t.errors[0]
    assert (warning.current.stream, warning.previous, warning.allocation) == (S2, None, None)


# -- (e) zero-size tensors ----------------------------------------------------------------------


def test_zero_size_tensors_never_collide():
    t = Tracker()
    t.allocated(BASE, 0, S0)
    t.kernel_launched(S1, "fill_", [Access(BASE, 0, True, "self")])
    t.kernel_launched(S2, "fill_", [Access(BASE, 0, True, "self")])
    assert t.errors == [] and t.stats()["allocations"] == 0


# -- (f) every error, once ------------------------------------------------------------------------


def test_race_in_a_loop_is_reported_once():
    t = Tracker()
    for i in range(50):
        ptr = BASE + 0x1000 * i
        t.allocated(ptr, 64, S0, capture_stack())
        t.kernel_launched(S0, "fill_", [Access(ptr, 64, True, "self")], capture_stack())
        t.kernel_launched(S1, "mul", [Access(ptr, 64, False, "self")], capture_stack())
    assert len(t.errors) == 1
    error = t.errors[0]
    assert resolve(error.current.stack)[-1].function == "test_race_in_a_loop_is_reported_once"


def test_distinct_sites_are_distinct_reports():
    t = Tracker()
    t.allocated(BASE, 64, S0, capture_stack())
    t.kernel_launched(S0, "fill_", [Access(BASE, 64, True, "self")], capture_stack())
    t.kernel_launched(S1, "mul", [Access(BASE, 64, False, "self")], capture_stack())
    t.kernel_launched(S2, "add", [Access(BASE, 64, False, "self")], capture_stack())
    assert [e.current.operator for e in t.errors] == ["mul", "add"]


def test_errors_without_stacks_are_kept_per_allocation():
    t = Tracker()
    for i in range(5):
        t.kernel_launched(S0, "fill_", [Access(BASE + 0x1000 * i, 64, True, "self")])
    for i in range(5):
        t.kernel_launched(S1, "fill_", [Access(BASE + 0x1000 * i, 64, True, "self")])
    assert len(t.errors) == 5


# -- CUDA graph capture -----------------------------------------------------------------------------


def test_capture_on_default_stream():
    t = Tracker()
    t.capture_began(S0)
    t.capture_ended(S0)
    assert [e.kind for e in t.errors] == [kinds.CAPTURE_ON_DEFAULT_STREAM]


def _fork(t: Tracker, event: int, source: int, target: int) -> None:
    t.event_recorded(event, source)
    t.event_waited(event, target)


def test_forked_and_joined_side_stream_is_clean():
    t = Tracker()
    t.capture_began(S1)
    _fork(t, 1, S1, S2)
    t.kernel_launched(S2, "mul", [Access(BASE, 64, True, "self")])
    _fork(t, 2, S2, S1)
    t.capture_ended(S1)
    assert t.errors == []


def test_side_stream_not_forked_from_capture():
    t = Tracker()
    _fork(t, 1, S1, S2)  # before the capture begins: not a fork of the capture
    t.capture_began(S1)
    t.kernel_launched(S2, "mul", [Access(BASE, 64, True, "self")])
    _fork(t, 2, S2, S1)
    t.capture_ended(S1)
    assert [(e.kind, e.current.stream, e.current.operator) for e in t.errors] == [
        (kinds.UNJOINED_CAPTURE_FORK, S2, "mul")
    ]


def test_side_stream_not_joined_before_capture_end():
    t = Tracker()
    t.capture_began(S1)
    _fork(t, 1, S1, S2)
    t.kernel_launched(S2, "mul", [Access(BASE, 64, True, "self")])
    t.capture_ended(S1)
    assert [(e.kind, e.current.operator, e.previous.stream, e.previous.operator) for e in t.errors] == [
        (kinds.UNJOINED_CAPTURE_FORK, "capture_end", S2, "mul")
    ]


def test_side_stream_used_again_after_its_join():
    t = Tracker()
    t.capture_began(S1)
    _fork(t, 1, S1, S2)
    t.kernel_launched(S2, "mul", [Access(BASE, 64, True, "self")])
    _fork(t, 2, S2, S1)
    t.kernel_launched(S2, "add", [Access(BASE + 64, 64, True, "self")])  # after the join
    t.capture_ended(S1)
    assert [(e.kind, e.previous.operator) for e in t.errors] == [(kinds.UNJOINED_CAPTURE_FORK, "add")]


def test_capture_ended_on_another_stream():
    t = Tracker()
    t.capture_began(S1)
    t.capture_ended(S2)
    assert [(e.kind, e.current.stream, e.previous.stream) for e in t.errors] == [(kinds.UNJOINED_CAPTURE_FORK, S2, S1)]


# -- bounded memory ---------------------------------------------------------------------------------


def test_shadow_state_stays_bounded_over_a_long_churn():
    t = Tracker()
    for i in range(100_000):
        ptr = BASE + 0x1000 * (i % 7)
        side = S1 + i % 3
        t.allocated(ptr, 256, S0)
        t.kernel_launched(S0, "fill_", [Access(ptr, 256, True, "self")])
        _fork(t, 10 + i % 4, S0, side)
        t.kernel_launched(side, "mul", [Access(ptr, 256, False, "self"), Access(ptr + 128, 64, False, "other")])
        t.stream_recorded(ptr, side)
        t.freed(ptr)
    stats = t.stats()
    assert stats["errors"] == 0
    assert stats["allocations"] == 0 and stats["intervals"] == 0
    assert stats["streams"] <= 4 and stats["events"] <= 4
    assert len(t.reported) == 0 and len(t._bases) == 0


def test_engine_imports_no_torch():
    import subprocess

    modules = "csan_lint.runtime.tracker, csan_lint.runtime.report, csan_lint.runtime.trace, csan_lint.runtime.replay"
    code = f"import sys, {modules}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_wait_on_an_event_recorded_before_the_engine_began_is_no_unrecorded_wait():
    """The sanitizer enabled (or restarted) after `e.record()`: the handle exists, so the event
    was recorded; the wait orders work the engine never saw, and reports nothing."""
    t = Tracker()
    t.event_waited(0x7F00, S2)
    t.kernel_launched(S1, "fill_", [Access(BASE, 64, True, "self")])
    t.event_waited(0x7F00, S2)
    assert t.errors == []
    t.kernel_launched(S2, "mul", [Access(BASE, 64, False, "self")])  # not ordered after S1's fill_
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]


def test_the_unrecorded_handle_is_always_an_unrecorded_wait():
    t = Tracker()
    t.event_deleted(UNRECORDED_EVENT)  # no event has that handle: nothing to forget
    t.event_waited(UNRECORDED_EVENT, S1)
    assert [e.kind for e in t.errors] == [kinds.WAIT_UNRECORDED_EVENT]


def test_blocking_streams_sync_with_their_own_devices_default_stream():
    """Each device has its own legacy default stream: a blocking stream of device 1 is ordered
    with device 1's default stream (its engine id: -3), not with device 0's."""
    device1_default, blocking0, blocking1 = -3, 0x7100, 0x7200
    t = Tracker()
    t.stream_created(blocking0, blocking=True)
    t.stream_created(blocking1, blocking=True, default_stream=device1_default)
    t.kernel_launched(blocking1, "fill_", [Access(BASE, 64, True, "self")])
    t.kernel_launched(device1_default, "mul", [Access(BASE, 64, False, "self")])  # waits for blocking1
    assert t.errors == []
    t.kernel_launched(blocking1, "add_", [Access(BASE, 64, True, "self")])  # waits for device 1's default
    assert t.errors == []
    t.kernel_launched(S0, "sum", [Access(BASE, 64, False, "self")])  # device 0's default: unordered
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]
