"""The sanitizer under load from several threads, with memory measured by tracemalloc: the
engine's shadow state must stay bounded (per-interval epochs, deduplicated reports), however many
operations run. A million engine events here; real torch ops are ~1000x dearer, so a few thousand
here and the full million in benchmarks/fuzz_static.py."""

from __future__ import annotations

import pytest

import csan_lint_robustness_workloads as workloads  # loaded by this directory's conftest.py
from csan_lint.runtime import kinds

THREADS = 4


def test_a_million_engine_events_from_threads_in_bounded_memory() -> None:
    result = workloads.tracker_stress(THREADS, iterations=31_250)
    assert result.operations >= 1_000_000
    # One write-after-read per thread, reported once however often it repeats.
    assert sorted(error.kind for error in result.errors) == [kinds.WRITE_AFTER_READ] * THREADS
    assert len({error.current.stream for error in result.errors}) == THREADS
    assert result.stats["allocations"] == 0 and result.stats["streams"] == 2 * THREADS + 1
    # Anything kept per event (one small tuple is ~100 bytes) would be megabytes here.
    assert result.growth_bytes < 64 * 1024, result
    assert result.peak_bytes < 1024 * 1024, result


def test_torch_ops_from_threads_on_the_emulated_device_in_bounded_memory() -> None:
    pytest.importorskip("torch")
    result = workloads.torch_stress(THREADS, iterations=300)
    assert result.operations >= 3_600
    assert result.errors == [] and result.internal_errors == []  # correct code: nothing to report
    assert result.stats["allocations"] <= 4 * THREADS and result.stats["errors"] == 0
    # A stack or a record kept per op would be kilobytes each.
    assert result.growth_bytes < 25 * result.operations, result
