"""The contract (runtime/cuda_semantics.py) against runs: each scripted torch action, run under
the sanitizer with its trace written, makes exactly the engine events the contract states, in
order; the device fires a trace callback for a host sync exactly when the contract says CUDA
does. On the emulated device here, on a real GPU under `requires_cuda` (the GPU check)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime import cuda_semantics, kinds
from csan_lint.runtime.sanitizer import Sanitizer

DEVICES = ["emulated", pytest.param("cuda", marks=pytest.mark.requires_cuda)]
N = 4096
COPY_EVENTS = {"kernel_launched", "stream_synchronized", "host_accessed", "device_synchronized"}
"""What a copy is to the engine (a GPU's host allocator also records events of its own)."""


class Run:
    """A sanitized run whose trace is kept: `since_mark()` is the engine calls made since
    `mark()`, and `traced_syncs` the stream-sync callbacks the device fired since then."""

    def __init__(self, device: str) -> None:
        self.out = io.StringIO()
        self.sanitizer = Sanitizer(device=device, trace_out=self.out)
        self.position = 0
        self.traced_syncs = 0

    def _count(self, stream: int) -> None:
        self.traced_syncs += 1

    def mark(self) -> None:
        self.sanitizer.sink.flush()
        self.position = len(self.out.getvalue())
        self.traced_syncs = 0

    def since_mark(
        self, keep: Callable[[str], bool] = lambda name: name not in ("allocated", "freed")
    ) -> list[dict[str, Any]]:
        self.sanitizer.sink.flush()
        lines = self.out.getvalue()[self.position :].splitlines()
        return [event for event in map(json.loads, lines) if keep(event["event"])]


@pytest.fixture(params=DEVICES)
def run(request: pytest.FixtureRequest) -> Iterator[Run]:
    recorder = Run(request.param)
    with recorder.sanitizer:
        _gpu_trace.StreamSynchronizationCallbacks.add_callback(recorder._count)
        try:
            yield recorder
        finally:
            _gpu_trace.StreamSynchronizationCallbacks.callback_list.remove(recorder._count)


COMBINATIONS = sorted(cuda_semantics.COPIES)


@pytest.mark.parametrize(("direction", "pinned", "non_blocking"), COMBINATIONS)
def test_copy_with_copy_makes_the_contracts_events(run, direction, pinned, non_blocking):
    effect = cuda_semantics.COPIES[(direction, pinned, non_blocking)]
    device = torch.ones(N, device="cuda")
    host = torch.ones(N, pin_memory=pinned)
    assert host.is_pinned() == pinned
    run.mark()
    if direction == cuda_semantics.D2H:
        host.copy_(device, non_blocking=non_blocking)
    else:
        device.copy_(host, non_blocking=non_blocking)
    _check_copy(run, effect, host)


@pytest.mark.parametrize(("to_host", "non_blocking"), [(False, False), (False, True), (True, False), (True, True)])
def test_copy_with_to_makes_the_contracts_events(run, to_host, non_blocking):
    if to_host:
        device = torch.ones(N, device="cuda")
        run.mark()
        host = device.to("cpu", non_blocking=non_blocking)
        pinned = cuda_semantics.to_copy_pins_result(True, non_blocking)
        assert host.is_pinned() == pinned
    else:
        host = torch.ones(N)
        run.mark()
        host.to("cuda", non_blocking=non_blocking)
        pinned = False
    effect = cuda_semantics.copy_effect(to_host, pinned, non_blocking)
    _check_copy(run, effect, host)


def _check_copy(run: Run, effect: cuda_semantics.CopyEffect, host: torch.Tensor) -> None:
    events = run.since_mark(COPY_EVENTS.__contains__)
    assert tuple(event["event"] for event in events) == effect.engine_events(), effect
    (kernel,) = (event for event in events if event["event"] == "kernel_launched")
    touches_host = any(access["ptr"] == host.data_ptr() for access in kernel["accesses"])
    assert touches_host == effect.host_pending, effect
    assert run.traced_syncs == (1 if effect.sync_traced else 0), effect


def test_every_combination_of_a_copy_has_one_effect():
    directions = (cuda_semantics.H2D, cuda_semantics.D2H)
    assert set(cuda_semantics.COPIES) == {(d, p, n) for d in directions for p in (False, True) for n in (False, True)}
    pageable_in = cuda_semantics.copy_effect(to_host=False, pinned=False, non_blocking=True)
    assert not pageable_in.host_syncs and not pageable_in.host_pending  # staged, no device sync
    pageable_out = cuda_semantics.copy_effect(to_host=True, pinned=False, non_blocking=True)
    assert pageable_out.host_syncs and not pageable_out.sync_traced  # synchronous, no callback
    for key, effect in cuda_semantics.COPIES.items():
        assert effect.source.quote, key


def test_a_pageable_upload_orders_nothing_so_the_race_after_it_is_reported(run):
    """Staged: the host does not wait for the side stream, so the default stream's write after
    it is unordered with the side stream's (the mode took it as a host sync and missed it)."""
    data = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    staging = torch.empty(N, device="cuda")
    with torch.cuda.stream(side):
        data.add_(1)
        staging.copy_(torch.ones(N), non_blocking=True)
    data.mul_(2)
    assert [error.kind for error in run.sanitizer.errors] == [kinds.WRITE_AFTER_WRITE]


def test_a_download_to_pageable_memory_orders_the_host_after_the_stream(run):
    data = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    host = torch.empty(N)
    with torch.cuda.stream(side):
        data.add_(1)
        host.copy_(data, non_blocking=True)  # returns once the copy is done
    assert side.query()  # the host knows the stream's work is done
    data.mul_(2)
    assert run.sanitizer.errors == []


# -- streams, events, syncs ------------------------------------------------------------------

EVENT_KINDS = {"torch.cuda.Event": lambda: torch.cuda.Event(), "torch.Event": lambda: torch.Event("cuda")}
STREAM_KINDS = {"torch.cuda.Stream": lambda: torch.cuda.Stream(), "torch.Stream": lambda: torch.Stream("cuda")}


def _recorded(make: Callable[[], Any]) -> Any:
    event = make()
    event.record()
    torch.cuda.synchronize()  # nothing pending: queries answer True
    return event


SCRIPTS: list[tuple[str, str, Callable[[Run, Any], Any], Callable[[Any], Any]]] = [
    # (action, spelling, setup(run, maker) -> subject, act(subject))
    *[("event record", kind, lambda run, make: make(), lambda event: event.record()) for kind in EVENT_KINDS],
    *[
        ("event wait (recorded)", kind, lambda run, make: _recorded(make), lambda event: event.wait())
        for kind in EVENT_KINDS
    ],
    *[
        ("event wait (never recorded)", kind, lambda run, make: make(), lambda event: event.wait())
        for kind in EVENT_KINDS
    ],
    *[("event query", kind, lambda run, make: _recorded(make), lambda event: event.query()) for kind in EVENT_KINDS],
    *[
        ("event synchronize", kind, lambda run, make: _recorded(make), lambda event: event.synchronize())
        for kind in EVENT_KINDS
    ],
    *[("stream query", kind, lambda run, make: make(), lambda stream: stream.query()) for kind in STREAM_KINDS],
    *[
        ("stream synchronize", kind, lambda run, make: make(), lambda stream: stream.synchronize())
        for kind in STREAM_KINDS
    ],
    (
        "stream wait_stream",
        "torch.cuda.Stream",
        lambda run, make: make(),
        lambda stream: stream.wait_stream(torch.cuda.current_stream()),
    ),
    ("device synchronize", "torch.cuda", lambda run, make: None, lambda _: torch.cuda.synchronize()),
    (
        "record_stream",
        "torch.Tensor",
        lambda run, make: (torch.ones(N, device="cuda"), torch.cuda.Stream()),
        lambda subject: subject[0].record_stream(subject[1]),
    ),
]
MAKERS = {**EVENT_KINDS, **STREAM_KINDS}


@pytest.mark.parametrize(("action", "spelling", "setup", "act"), SCRIPTS, ids=[f"{a}-{s}" for a, s, _, _ in SCRIPTS])
def test_action_makes_the_contracts_events(run, action, spelling, setup, act):
    subject = setup(run, MAKERS.get(spelling))
    run.mark()
    act(subject)
    names = tuple(event["event"] for event in run.since_mark())
    assert names == cuda_semantics.ACTIONS[action].engine
    unrecorded = action == "event wait (never recorded)"
    assert [e.kind for e in run.sanitizer.errors] == ([kinds.WAIT_UNRECORDED_EVENT] if unrecorded else [])


def test_every_untraced_action_names_the_methods_the_sanitizer_wraps():
    for name, effect in cuda_semantics.ACTIONS.items():
        assert effect.source.quote, name
        if effect.traced:
            assert not effect.methods, name
        else:
            assert effect.methods, name
    spelled = {owner for owner, _ in cuda_semantics.ACTIONS["event query"].methods}
    assert spelled == set(cuda_semantics.EVENT_CLASSES)


def test_capture_rules_are_one_statement():
    assert cuda_semantics.capture_forbids_sync("global", same_thread=False)
    assert cuda_semantics.capture_forbids_sync("thread_local", same_thread=True)
    assert not cuda_semantics.capture_forbids_sync("thread_local", same_thread=False)
    assert not cuda_semantics.capture_forbids_sync("relaxed", same_thread=True)
    assert [cuda_semantics.capture_is_lenient(m) for m in cuda_semantics.CAPTURE_ERROR_MODES] == [False, True, True]
