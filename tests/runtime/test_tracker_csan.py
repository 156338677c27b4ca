"""CSAN's own TestEventHandler cases (pytorch test/test_cuda_sanitizer.py), ported in spirit to
the Tracker: the engine must agree with CSAN wherever CSAN is right."""

from __future__ import annotations

from csan_lint.runtime import kinds


def test_empty_kernel_launch(sim):
    sim.assert_clean(sim.stream(0))


def test_simple_passing(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), read=[t])
    sim.assert_clean(sim.stream(2), read=[t])


def test_simple_error(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), read=[t])
    sim.assert_race(sim.stream(2), write=[t], kind=kinds.WRITE_AFTER_READ)


def test_simple_sync(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), read=[t])
    sim.record(sim.event(0), sim.stream(1))
    sim.wait(sim.event(0), sim.stream(2))
    sim.assert_clean(sim.stream(2), write=[t])


def test_reads_check_last_write(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.record(sim.event(0), sim.stream(1))
    sim.wait(sim.event(0), sim.stream(2))
    sim.assert_clean(sim.stream(2), read=[t])
    sim.assert_race(sim.stream(3), read=[t], kind=kinds.READ_AFTER_WRITE)


def test_branch_sync(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.record(sim.event(0), sim.stream(1))
    sim.wait(sim.event(0), sim.stream(2))
    sim.wait(sim.event(0), sim.stream(3))
    sim.assert_clean(sim.stream(2), read=[t])
    sim.assert_clean(sim.stream(3), read=[t])
    sim.assert_race(sim.stream(2), write=[t], kind=kinds.WRITE_AFTER_READ)


def test_chain_sync(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(0), read=[t])
    for i in range(10):
        sim.record(sim.event(i), sim.stream(i))
        sim.wait(sim.event(i), sim.stream(i + 1))
    sim.assert_clean(sim.stream(10), write=[t])


def test_expired_record(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), read=[t])
    sim.record(sim.event(0), sim.stream(1))
    sim.assert_clean(sim.stream(1), read=[t])
    sim.wait(sim.event(0), sim.stream(2))
    sim.assert_race(sim.stream(2), write=[t], kind=kinds.WRITE_AFTER_READ)


def test_deleted_record(sim):
    for should_delete, should_create in [(True, True), (True, False), (False, True)]:
        sim.__init__()
        t = sim.tensor(1)
        sim.assert_clean(sim.stream(1), read=[t])
        sim.record(sim.event(0), sim.stream(1))
        if should_delete:
            sim.tracker.event_deleted(sim.event(0))
        if should_create:
            sim.tracker.event_created(sim.event(0))
        sim.wait(sim.event(0), sim.stream(2))
        sim.assert_race(sim.stream(2), write=[t], kind=kinds.WRITE_AFTER_READ)


def test_all_reads_checked_failing(sim):
    t = sim.tensor(1)
    for i in range(1, 11):
        sim.assert_clean(sim.stream(i), read=[t])
        sim.record(sim.event(i), sim.stream(i))
    for i in range(1, 10):  # stream 10's read is never waited for
        sim.wait(sim.event(i), sim.stream(0))
    new = sim.assert_race(sim.stream(0), write=[t], kind=kinds.WRITE_AFTER_READ)
    assert [e.previous.stream for e in new] == [sim.stream(10)]


def test_all_reads_checked_passing(sim):
    t = sim.tensor(1)
    for i in range(1, 10):
        sim.assert_clean(sim.stream(i), read=[t])
        sim.record(sim.event(i), sim.stream(i))
    for i in range(1, 10):
        sim.wait(sim.event(i), sim.stream(0))
    sim.assert_clean(sim.stream(0), write=[t])


def test_multiple_errors(sim):
    tensors = [sim.tensor(i) for i in range(10)]
    sim.assert_clean(sim.stream(0), write=tensors)
    new = sim.assert_race(sim.stream(1), write=tensors, kind=kinds.WRITE_AFTER_WRITE)
    assert len(new) == 10


def test_correct_state_merging(sim):
    a, b = sim.tensor(1), sim.tensor(2)
    sim.assert_clean(sim.stream(1), write=[a])
    sim.assert_clean(sim.stream(2), write=[b])
    sim.record(sim.event(1), sim.stream(1))
    sim.record(sim.event(2), sim.stream(2))
    sim.assert_clean(sim.stream(1), write=[a])
    sim.assert_clean(sim.stream(2), write=[b])
    sim.wait(sim.event(1), sim.stream(2))
    sim.wait(sim.event(2), sim.stream(1))
    sim.record(sim.event(3), sim.stream(2))
    sim.wait(sim.event(3), sim.stream(1))
    sim.assert_clean(sim.stream(1), write=[a, b])


def test_record_override(sim):
    a, b = sim.tensor(1), sim.tensor(2)
    sim.assert_clean(sim.stream(1), read=[a])
    sim.assert_clean(sim.stream(2), read=[b])
    sim.record(sim.event(1), sim.stream(1))
    sim.record(sim.event(1), sim.stream(2))  # re-recording replaces the snapshot
    sim.wait(sim.event(1), sim.stream(3))
    sim.assert_race(sim.stream(3), write=[a], kind=kinds.WRITE_AFTER_READ)


def test_multiple_wait(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.record(sim.event(1), sim.stream(1))
    sim.wait(sim.event(1), sim.stream(2))
    sim.wait(sim.event(1), sim.stream(3))
    sim.assert_clean(sim.stream(2), read=[t])
    sim.assert_clean(sim.stream(3), read=[t])


def test_stream_synchronize(sim):
    a, b = sim.tensor(1), sim.tensor(2)
    sim.assert_clean(sim.stream(0), write=[a])
    sim.assert_clean(sim.stream(1), write=[b])
    sim.tracker.stream_synchronized(sim.stream(0))
    sim.assert_clean(sim.stream(2), read=[a])
    sim.assert_clean(sim.stream(3), read=[a])
    sim.assert_race(sim.stream(4), read=[b], kind=kinds.READ_AFTER_WRITE)


def test_event_synchronize(sim):
    a, b = sim.tensor(1), sim.tensor(2)
    sim.assert_clean(sim.stream(1), write=[a])
    sim.record(sim.event(1), sim.stream(1))
    sim.assert_clean(sim.stream(1), write=[b])
    sim.tracker.event_synchronized(sim.event(1))
    sim.assert_clean(sim.stream(2), write=[a])
    sim.assert_race(sim.stream(2), write=[b], kind=kinds.WRITE_AFTER_WRITE)


def test_device_synchronize(sim):
    tensors = [sim.tensor(i) for i in range(1, 10)]
    for i, t in enumerate(tensors, start=1):
        sim.assert_clean(sim.stream(i), write=[t])
    sim.tracker.device_synchronized()
    sim.assert_clean(sim.stream(0), write=tensors)
    # The sync ordered the earlier writes, not stream 0's new ones.
    sim.assert_race(sim.stream(10), read=tensors, kind=kinds.READ_AFTER_WRITE)


def test_sync_orders_streams_created_later(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.tracker.device_synchronized()
    sim.tracker.stream_created(sim.stream(9))
    sim.assert_clean(sim.stream(9), write=[t])


def test_backfilled_stream_event_and_tensor(sim):
    """Streams, events and tensors never seen created work as if they had been (CSAN backfills)."""
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(7), write=[t])  # stream and tensor unseen
    sim.record(sim.event(5), sim.stream(7))  # event unseen
    sim.wait(sim.event(5), sim.stream(8))
    sim.assert_clean(sim.stream(8), read=[t])
    sim.tracker.event_deleted(sim.event(99))  # deleting an unknown event is harmless
    sim.tracker.freed(sim.tensor(42))  # so is freeing an unknown block
    assert sim.tracker.errors == []


def test_duplicate_stream_creation_keeps_state(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.record(sim.event(1), sim.stream(1))
    sim.wait(sim.event(1), sim.stream(2))
    sim.tracker.stream_created(sim.stream(2))  # pool handles repeat: ignored, ordering kept
    sim.assert_clean(sim.stream(2), read=[t])


def test_duplicate_allocation_forgets_old_accesses(sim):
    t = sim.tensor(1)
    sim.assert_clean(sim.stream(1), write=[t])
    sim.tracker.allocated(t, 64, sim.stream(2))  # free never seen: the block is new
    sim.assert_clean(sim.stream(2), write=[t])
