"""The engine's whole-block fast path settles only what is certainly ordered: a stream's own
earlier accesses. Every other case still reaches the full check."""

from __future__ import annotations

from csan_lint.runtime import kinds


def test_write_after_own_read_is_ordered(sim):
    s0 = sim.stream(0)
    x = sim.tensor(0)
    sim.assert_clean(s0, write=[x])
    sim.assert_clean(s0, read=[x])
    sim.assert_clean(s0, write=[x])


def test_write_after_own_and_other_read_races(sim):
    s0, s1 = sim.stream(0), sim.stream(1)
    x = sim.tensor(0)
    sim.assert_clean(s1, read=[x])
    sim.assert_clean(s0, read=[x])
    sim.assert_race(s0, write=[x], kind=kinds.WRITE_AFTER_READ)


def test_write_after_other_streams_only_read_races(sim):
    s0, s1 = sim.stream(0), sim.stream(1)
    x = sim.tensor(0)
    sim.assert_clean(s1, read=[x])
    sim.assert_race(s0, write=[x], kind=kinds.WRITE_AFTER_READ)


def test_own_write_then_other_streams_write_races(sim):
    s0, s1 = sim.stream(0), sim.stream(1)
    x = sim.tensor(0)
    sim.assert_clean(s0, write=[x])
    sim.assert_clean(s0, write=[x])
    sim.assert_race(s1, read=[x], kind=kinds.READ_AFTER_WRITE)
    sim.assert_race(s1, write=[x], kind=kinds.WRITE_AFTER_WRITE)


def test_own_read_does_not_hide_the_other_streams_write(sim):
    s0, s1 = sim.stream(0), sim.stream(1)
    x = sim.tensor(0)
    sim.assert_clean(s1, write=[x])
    sim.assert_race(s0, read=[x], kind=kinds.READ_AFTER_WRITE)
    # The block's reads are now s0's own only, but s1's write is still unordered.
    sim.assert_race(s0, write=[x], kind=kinds.WRITE_AFTER_WRITE)
