"""Queries on the emulated device answer "not done" once after new work (the pending-once
policy in runtime/emulation/streams.py), so a program that ignores the answer is checked."""

from __future__ import annotations

import pytest
import torch

from csan_lint.runtime import kinds, sanitize


def test_a_stream_with_new_work_answers_false_once_then_true(device):
    side = torch.cuda.Stream()
    assert side.query()  # no work yet
    with torch.cuda.stream(side):
        torch.ones(4, device="cuda").mul_(2)
    assert not side.query()
    assert side.query()


def test_a_sync_makes_the_next_query_true(device):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.ones(4, device="cuda").mul_(2)
    event = side.record_event()
    torch.cuda.synchronize()
    assert side.query() and event.query()


def test_an_event_answers_for_the_work_before_its_record(device):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.ones(4, device="cuda").mul_(2)
    event = side.record_event()
    assert not event.query()
    assert event.query() and side.query()  # the event's work is all the stream had
    event.record(side)
    assert event.query()  # nothing new since


def test_an_event_synchronize_makes_its_query_true(device):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.ones(4, device="cuda").mul_(2)
    event = side.record_event()
    event.synchronize()
    assert event.query()


def _side_stream_write(x: torch.Tensor) -> torch.cuda.Stream:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
    return side


@pytest.mark.parametrize("query", ["stream", "event"])
def test_an_ignored_query_orders_nothing(query):
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        side = _side_stream_write(x)
        if query == "stream":
            side.query()
        else:
            side.record_event().query()
        x.sum()
    assert [e.kind for e in sanitizer.errors] == [kinds.READ_AFTER_WRITE]


@pytest.mark.parametrize("query", ["stream", "event"])
def test_polling_until_done_orders_the_host(query):
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        side = _side_stream_write(x)
        waitable = side if query == "stream" else side.record_event()
        polls = 1
        while not waitable.query():
            polls += 1
        x.sum()
    assert polls == 2
    assert sanitizer.errors == []
