"""Graph capture in the engine: event records and waits between the graph's streams are graph
edges that order nothing at capture time; launches outside a lenient capture are live work."""

from __future__ import annotations

from csan_lint.runtime import kinds
from csan_lint.runtime.events import Access
from csan_lint.runtime.tracker import Tracker

S0, CAPTURE, SIDE, OTHER = 0, 1001, 1002, 1003
X = 0x100000
E_BEFORE, E_FORK, E_JOIN = 1, 2, 3


def _captured_fork_and_join(t: Tracker) -> None:
    """The default stream writes X; the capture stream is ordered after it; a capture forks
    SIDE from the capture stream and joins it back."""
    t.allocated(X, 64, S0)
    t.kernel_launched(S0, "fill_", [Access(X, 64, True, "self")])
    for event in (E_BEFORE, E_FORK, E_JOIN):
        t.event_created(event)
    t.event_recorded(E_BEFORE, S0)
    t.event_waited(E_BEFORE, CAPTURE)
    t.capture_began(CAPTURE)
    t.event_recorded(E_FORK, CAPTURE)
    t.event_waited(E_FORK, SIDE)
    t.kernel_launched(SIDE, "mul", [])  # captured: runs at replay
    t.event_recorded(E_JOIN, SIDE)
    t.event_waited(E_JOIN, CAPTURE)
    t.capture_ended(CAPTURE)


def test_a_fork_made_during_capture_orders_nothing_live():
    t = Tracker()
    _captured_fork_and_join(t)
    assert t.errors == []  # the capture's own structure is sound
    t.kernel_launched(SIDE, "add", [Access(X, 64, False, "self")])  # live work on SIDE
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]


def test_live_ordering_before_the_capture_still_holds():
    t = Tracker()
    _captured_fork_and_join(t)
    t.kernel_launched(CAPTURE, "add", [Access(X, 64, False, "self")])
    assert t.errors == []


def test_an_unjoined_side_stream_is_reported_at_capture_end():
    t = Tracker()
    t.event_created(E_FORK)
    t.capture_began(CAPTURE)
    t.event_recorded(E_FORK, CAPTURE)
    t.event_waited(E_FORK, SIDE)
    t.kernel_launched(SIDE, "mul", [])
    t.capture_ended(CAPTURE)
    assert [e.kind for e in t.errors] == [kinds.UNJOINED_CAPTURE_FORK]


def test_a_launch_outside_a_global_capture_is_an_unforked_side_stream():
    t = Tracker()
    t.capture_began(CAPTURE)
    t.kernel_launched(OTHER, "mul", [])
    t.capture_ended(CAPTURE)
    assert [e.kind for e in t.errors] == [kinds.UNJOINED_CAPTURE_FORK]


def test_a_launch_outside_a_lenient_capture_is_live_work():
    t = Tracker()
    t.allocated(X, 64, S0)
    t.capture_began(CAPTURE, lenient=True)
    t.kernel_launched(OTHER, "fill_", [Access(X, 64, True, "self")])
    t.capture_ended(CAPTURE)
    assert t.errors == []
    t.kernel_launched(S0, "add", [Access(X, 64, False, "self")])  # and it is checked live
    assert [e.kind for e in t.errors] == [kinds.READ_AFTER_WRITE]


def test_a_launch_from_outside_the_capture_is_live_work_even_in_a_global_capture():
    t = Tracker()
    t.capture_began(CAPTURE)
    t.kernel_launched(OTHER, "mul", [], outside_capture=True)
    t.capture_ended(CAPTURE)
    assert t.errors == []
