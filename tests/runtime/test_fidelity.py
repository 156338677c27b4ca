"""Holes the engine had (issue 14), each as the synthetic events that exposed it: a racy write
hid earlier accesses, strided views were one extent, blocking streams ignored the legacy default
stream, and an allocation was a launch of its own."""

from __future__ import annotations

import random

import pytest

from csan_lint.runtime import kinds
from csan_lint.runtime.cells import PARTIAL_CAP
from csan_lint.runtime.events import DEFAULT_STREAM, Access
from csan_lint.runtime.extents import MAX_ROWS
from csan_lint.runtime.report import message
from csan_lint.runtime.tracker import ALLOCATION_OPERATOR, Tracker

S1, S2, S3 = 1001, 1002, 1003
BASE, SIZE = 0x100000, 64


def _join(t: Tracker, source: int, target: int, event: int) -> None:
    t.event_recorded(event, source)
    t.event_waited(event, target)


def _found(t: Tracker) -> list[tuple[str, str, str]]:
    return [(e.kind, e.current.operator, e.previous.operator) for e in t.errors]


# -- a racy write hides nothing -------------------------------------------------------------------


def test_a_write_after_a_racing_write_still_races_the_earlier_read():
    t = Tracker()
    t.allocated(BASE, SIZE, None)
    t.kernel_launched(S1, "R1", [Access(BASE, SIZE, False, "self")])
    t.kernel_launched(S2, "W2", [Access(BASE, SIZE, True, "self")])
    _join(t, S2, S3, 1)  # S3 is ordered after W2, not after R1
    t.kernel_launched(S3, "W3", [Access(BASE, SIZE, True, "self")])
    assert _found(t) == [(kinds.WRITE_AFTER_READ, "W2", "R1"), (kinds.WRITE_AFTER_READ, "W3", "R1")]


def test_an_access_after_a_racing_write_still_races_the_earlier_write():
    for is_write, kind in ((False, kinds.READ_AFTER_WRITE), (True, kinds.WRITE_AFTER_WRITE)):
        t = Tracker()
        t.allocated(BASE, SIZE, None)
        t.kernel_launched(S1, "W1", [Access(BASE, SIZE, True, "self")])
        t.kernel_launched(S2, "W2", [Access(BASE, SIZE, True, "self")])
        _join(t, S2, S3, 1)
        t.kernel_launched(S3, "A3", [Access(BASE, SIZE, is_write, "self")])
        assert _found(t) == [(kinds.WRITE_AFTER_WRITE, "W2", "W1"), (kind, "A3", "W1")]


def test_ordered_after_both_the_racing_accesses_are_gone():
    t = Tracker()
    t.allocated(BASE, SIZE, None)
    t.kernel_launched(S1, "R1", [Access(BASE, SIZE, False, "self")])
    t.kernel_launched(S2, "W2", [Access(BASE, SIZE, True, "self")])
    _join(t, S1, S2, 1)
    t.kernel_launched(S2, "W3", [Access(BASE, SIZE, True, "self")])  # after R1 and W2: clean
    _join(t, S2, S3, 2)
    t.kernel_launched(S3, "W4", [Access(BASE, SIZE, True, "self")])
    assert _found(t) == [(kinds.WRITE_AFTER_READ, "W2", "R1")]
    assert t.stats()["partial"] == 0


# -- strided views touch only their bytes ---------------------------------------------------------

ROWS, COLS, ITEM = 8, 6, 4  # a row-major float matrix at BASE
LEFT = Access(BASE, ((ROWS - 1) * COLS + 3) * ITEM, True, "self", True, (ITEM, (ROWS, 3), (COLS, 1)))
RIGHT = Access(BASE + 3 * ITEM, ((ROWS - 1) * COLS + 3) * ITEM, True, "self", True, (ITEM, (ROWS, 3), (COLS, 1)))
EVEN = Access(BASE, (ROWS * COLS - 1) * ITEM, True, "self", True, (ITEM, (ROWS * COLS // 2,), (2,)))
ODD = Access(BASE + ITEM, (ROWS * COLS - 1) * ITEM, True, "self", True, (ITEM, (ROWS * COLS // 2,), (2,)))
WHOLE = ROWS * COLS * ITEM


@pytest.mark.parametrize(("first", "second"), [(LEFT, RIGHT), (EVEN, ODD)], ids=["column-blocks", "interleaved"])
def test_disjoint_strided_views_on_two_streams_do_not_race(first, second):
    t = Tracker()
    t.allocated(BASE, WHOLE, DEFAULT_STREAM)
    t.kernel_launched(S1, "left", [first])
    t.kernel_launched(S2, "right", [second, second._replace(is_write=False)])
    assert t.errors == []
    # A read of the whole matrix is ordered after one writer only: it races the other.
    _join(t, S1, S3, 1)
    t.kernel_launched(S3, "sum", [Access(BASE, WHOLE, False, "self")])
    assert _found(t) == [(kinds.READ_AFTER_WRITE, "sum", "right")]


def test_a_strided_view_races_the_bytes_it_shares():
    t = Tracker()
    t.allocated(BASE, WHOLE, DEFAULT_STREAM)
    t.kernel_launched(S1, "left", [LEFT])
    column_2 = Access(BASE + 2 * ITEM, (ROWS - 1) * COLS * ITEM + ITEM, False, "self", False, (ITEM, (ROWS,), (COLS,)))
    t.kernel_launched(S2, "col2", [column_2])
    t.kernel_launched(S2, "even", [EVEN._replace(is_write=False)])
    assert _found(t) == [(kinds.READ_AFTER_WRITE, "col2", "left"), (kinds.READ_AFTER_WRITE, "even", "left")]


def test_strided_accesses_match_a_bytewise_shadow():
    """Random strided reads and writes on three streams against one access per byte: the same
    accesses race, and every race the bytewise run names is named. A strided write does not hide
    its stream's earlier accesses (it may not cover their bytes), so a race may also name one of
    them, equally unordered."""
    rng = random.Random(7)
    for _ in range(40):
        program = []
        for i in range(12):
            rows, step = rng.randint(1, 4), rng.choice((1, 2, 3))
            start = rng.randrange(0, 8)
            layout = (ITEM, (rows, rng.randint(1, 3)), (rng.choice((3, 4, 6)), step))
            program.append((rng.choice((S1, S2, S3)), f"op{i}", start, layout, rng.random() < 0.5, rng.random() < 0.2))
        strided, bytewise = _strided_run(program, bytewise=False), _strided_run(program, bytewise=True)
        assert {current for _, current, _ in strided} == {current for _, current, _ in bytewise}
        assert bytewise <= strided


def _strided_run(program: list[tuple], bytewise: bool) -> set[tuple[str, str, str]]:
    t = Tracker()
    t.allocated(BASE, 4096, DEFAULT_STREAM)
    for n, (stream, operator, start, layout, is_write, join) in enumerate(program):
        if join:
            _join(t, stream, S3 if stream != S3 else S1, n)
        item, sizes, strides = layout
        offsets = sorted(
            {(start + a * strides[0] + b * strides[1]) * item for a in range(sizes[0]) for b in range(sizes[1])}
        )
        if bytewise:
            accesses = [Access(BASE + o + k, 1, is_write, "self") for o in offsets for k in range(item)]
        else:
            low, high = offsets[0], offsets[-1] + item
            accesses = [Access(BASE + low, high - low, is_write, "self", False, layout)]
        t.kernel_launched(stream, operator, accesses)
    return set(_found(t))


def test_too_many_rows_fall_back_to_the_extent_and_are_counted():
    t = Tracker()
    rows = MAX_ROWS + 1
    layout = (ITEM, (rows, 2, 2), (8, 4, 1))  # every other pair of floats: too many rows
    extent = ((rows - 1) * 8 + 6) * ITEM
    t.kernel_launched(S1, "a", [Access(BASE, extent, True, "self", False, layout)])
    t.kernel_launched(S2, "b", [Access(BASE + 2 * ITEM, extent, True, "self", False, layout)])
    assert [e.kind for e in t.errors] == [kinds.WRITE_AFTER_WRITE]  # safe: may overlap
    assert t.stats()["approximated"] == 2


def test_a_loop_over_columns_keeps_the_state_bounded():
    t = Tracker()
    t.allocated(BASE, 1000 * 4 * ITEM, DEFAULT_STREAM)
    for j in range(1000):  # column j of a 4 x 1000 matrix, on one stream
        column = Access(BASE + j * ITEM, (3 * 1000 + 1) * ITEM, True, "self", False, (ITEM, (4,), (1000,)))
        t.kernel_launched(S1, f"col{j % 3}", [column])
    stats = t.stats()
    assert stats["approximated"] > 0 and stats["partial"] <= stats["intervals"] * (PARTIAL_CAP + 2)
    t.kernel_launched(S2, "sum", [Access(BASE, 1000 * 4 * ITEM, False, "self")])
    assert {e.kind for e in t.errors} == {kinds.READ_AFTER_WRITE}  # still seen, widened or not


# -- blocking streams synchronize with the legacy default stream ------------------------------------


def test_blocking_streams_are_ordered_with_the_default_stream():
    t = Tracker()
    t.stream_created(S1, blocking=True)
    t.kernel_launched(DEFAULT_STREAM, "fill", [Access(BASE, SIZE, True, "self")])
    t.kernel_launched(S1, "mul", [Access(BASE, SIZE, True, "self")])  # waits for the default stream
    t.kernel_launched(DEFAULT_STREAM, "sum", [Access(BASE, SIZE, False, "self")])  # waits for S1
    assert t.errors == []


def test_non_blocking_streams_are_not():
    t = Tracker()
    t.stream_created(S1)
    t.stream_created(S2, blocking=True)
    t.stream_created(S2, blocking=False)  # a handle created again, now non-blocking
    for k, stream in enumerate((S1, S2)):
        t.kernel_launched(DEFAULT_STREAM, "fill", [Access(BASE + k * SIZE, SIZE, True, "self")])
        t.kernel_launched(stream, "mul", [Access(BASE + k * SIZE, SIZE, False, "self")])
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE] * 2


def test_two_blocking_streams_are_not_ordered_with_each_other():
    t = Tracker()
    t.stream_created(S1, blocking=True)
    t.stream_created(S2, blocking=True)
    t.kernel_launched(S1, "fill", [Access(BASE, SIZE, True, "self")])
    t.kernel_launched(S2, "mul", [Access(BASE, SIZE, False, "self")])
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]


def test_a_block_of_a_blocking_stream_used_on_the_default_stream_may_be_freed():
    """Its next user, the blocking stream's next allocation, waits for the default stream's
    work; a block of a non-blocking stream freed the same way and reallocated is in use."""
    t = Tracker()
    t.stream_created(S1, blocking=True)
    t.stream_created(S2)
    for k, stream in enumerate((S1, S2)):
        ptr = BASE + k * SIZE
        t.allocated(ptr, SIZE, stream)
        t.kernel_launched(stream, "fill", [Access(ptr, SIZE, True, "self")])
        t.kernel_launched(DEFAULT_STREAM, "sum", [Access(ptr, SIZE, False, "self")])
        t.freed(ptr)
        t.allocated(ptr, SIZE, stream)
    assert [(e.kind, e.previous.stream) for e in t.errors] == [
        (kinds.READ_AFTER_WRITE, S2),
        (kinds.FREE_IN_USE, DEFAULT_STREAM),
    ]


# -- an allocation is the block's earlier use, not a launch -------------------------------------------


def test_a_stream_that_waited_before_the_allocation_may_use_the_block():
    t = Tracker()
    t.kernel_launched(DEFAULT_STREAM, "earlier", [Access(BASE + 4096, SIZE, True, "self")])
    _join(t, DEFAULT_STREAM, S1, 1)  # no launch on the default stream after this
    t.allocated(BASE, SIZE, DEFAULT_STREAM)
    t.kernel_launched(S1, "fill", [Access(BASE, SIZE, True, "self")])
    assert t.errors == []


def test_a_stream_not_ordered_after_the_allocating_stream_races_the_blocks_reuse():
    t = Tracker()
    t.kernel_launched(DEFAULT_STREAM, "earlier", [Access(BASE + 4096, SIZE, True, "self")])
    t.allocated(BASE, SIZE, DEFAULT_STREAM)
    t.kernel_launched(S1, "fill", [Access(BASE, SIZE, True, "self")])
    (error,) = t.errors
    assert (error.kind, error.previous.operator, error.previous.stream) == (
        kinds.WRITE_AFTER_WRITE,
        ALLOCATION_OPERATOR,
        DEFAULT_STREAM,
    )
    assert "the hazard is the block's reuse" in message(error)


def test_an_allocation_does_not_advance_its_stream():
    t = Tracker()
    t.kernel_launched(DEFAULT_STREAM, "earlier", [Access(BASE + 4096, SIZE, True, "self")])
    t.event_recorded(1, DEFAULT_STREAM)
    t.allocated(BASE, SIZE, DEFAULT_STREAM)
    t.event_waited(1, S1)  # recorded before the allocation: still covers it
    t.kernel_launched(S1, "fill", [Access(BASE, SIZE, True, "self")])
    assert t.errors == []
