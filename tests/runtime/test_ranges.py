"""The interval bookkeeping (split on partial access, merge on write) must find exactly what a
byte-by-byte shadow finds: random programs run against both, compared report for report."""

from __future__ import annotations

import random

import pytest

from csan_lint.runtime.events import Access
from csan_lint.runtime.tracker import Tracker

BASE, SIZE = 0x4000, 24
STREAMS = (0, 1001, 1002, 1003)


def _random_program(rng: random.Random, steps: int) -> list[tuple]:
    program = []
    for i in range(steps):
        roll = rng.random()
        if roll < 0.7:
            lo = rng.randrange(SIZE)
            hi = SIZE if rng.random() < 0.3 else rng.randrange(lo + 1, SIZE + 1)
            lo = 0 if hi == SIZE and rng.random() < 0.5 else lo
            program.append(("launch", rng.choice(STREAMS), f"op{i}", lo, hi, rng.random() < 0.5))
        elif roll < 0.9:
            program.append(("join", rng.choice(STREAMS), rng.choice(STREAMS), i))
        elif roll < 0.95:
            program.append(("host", f"host{i}", rng.randrange(SIZE), rng.random() < 0.5))
        else:
            program.append(("sync", rng.choice(STREAMS)))
    return program


def _run(program: list[tuple], bytewise: bool) -> set[tuple[str, str, str]]:
    t = Tracker()
    if bytewise:
        for b in range(SIZE):
            t.allocated(BASE + b, 1, 0)
    else:
        t.allocated(BASE, SIZE, 0)
    for step in program:
        if step[0] == "launch":
            _, stream, operator, lo, hi, is_write = step
            if bytewise:
                accesses = [Access(BASE + b, 1, is_write, "self") for b in range(lo, hi)]
            else:
                accesses = [Access(BASE + lo, hi - lo, is_write, "self")]
            t.kernel_launched(stream, operator, accesses)
        elif step[0] == "join":
            _, source, target, event = step
            t.event_recorded(event, source)
            t.event_waited(event, target)
        elif step[0] == "host":
            _, operator, byte, is_write = step
            t.host_accessed(BASE + byte, 1, is_write, operator)
        else:
            t.stream_synchronized(step[1])
    return {(e.kind, e.current.operator, e.previous.operator) for e in t.errors}


@pytest.mark.parametrize("seed", range(300))
def test_intervals_match_a_bytewise_shadow(seed):
    program = _random_program(random.Random(seed), 40)
    assert _run(program, bytewise=False) == _run(program, bytewise=True)


def test_random_programs_do_race():
    """The comparison above is not vacuous: most programs report something."""
    racy = sum(bool(_run(_random_program(random.Random(seed), 40), bytewise=False)) for seed in range(50))
    assert racy > 25
