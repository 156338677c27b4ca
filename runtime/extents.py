"""Which bytes a strided access touches, and whether two accesses share one: torch-free, exact
for the layouts tensors have, cheap for the ones they mostly have.

An access is a contiguous extent [ptr, ptr + size) unless it carries a layout (element size,
sizes, strides in elements, as torch gives them). A layout is normalized once into a `Pattern`:
rows of equally spaced runs of bytes. Dimensions of size 1 or stride 0 add no byte, and a
dimension whose step is no longer than the run inside it widens the run; a layout that ends as
one run is dense (its extent is exact). The innermost remaining dimension spaces the runs of a
row; the outer ones give the rows' starts. Column blocks of a row-major matrix, `x[0::2]` and
`x[1::2]`, and every slice of a contiguous tensor are one row.

Two rows with the same step overlap iff an integer range meets an interval (O(1)); rows with
different steps are scanned run by run, the shorter side, after a gcd test that settles most
of them. Exactness is given up, and "may overlap" answered, only where it costs too much: a
layout of more than MAX_ROWS rows is taken as its whole extent, and two rows with different
steps of more than MAX_SCAN runs each are taken as overlapping. The tracker counts both
(`Tracker.stats()["approximated"]`).
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache
from math import gcd
from typing import NamedTuple

Layout = tuple[int, tuple[int, ...], tuple[int, ...]]
"""(element size in bytes, sizes, strides in elements) of a strided access."""

MAX_ROWS = 1024
MAX_SCAN = 4096

DISJOINT, OVERLAP, MAY_OVERLAP = 0, 1, 2
"""Answers of `overlap`: MAY_OVERLAP is the over-approximation (truthy, like OVERLAP)."""


class Pattern(NamedTuple):
    """Rows starting at `starts` (sorted); each row is `runs_per_row` runs of `run` bytes,
    `step` bytes apart (step > run: the runs of a row never touch)."""

    starts: tuple[int, ...]
    step: int
    runs_per_row: int  # not `count`: that would shadow tuple.count
    run: int


def _dims(layout: Layout) -> tuple[list[tuple[int, int]], int]:
    """(byte step, size) of the dimensions left around the innermost run, outermost first, and
    the run's length in bytes."""
    item, sizes, strides = layout
    steps = ((stride * item, size) for size, stride in zip(sizes, strides, strict=True) if size > 1 and stride)
    dims = sorted(steps, reverse=True)
    run = item
    while dims and dims[-1][0] <= run:
        step, size = dims.pop()
        run += (size - 1) * step
    return dims, run


@lru_cache(maxsize=4096)
def pattern(ptr: int, layout: Layout) -> Pattern | None:
    """The bytes of the access at `ptr` (its lowest byte) with `layout`; None when they are its
    whole extent (dense) or when the layout has more than MAX_ROWS rows (then the extent
    over-approximates, see `is_approximated`)."""
    dims, run = _dims(layout)
    if not dims:
        return None
    step, count = dims.pop()
    rows = 1
    for _, size in dims:
        rows *= size
    if rows > MAX_ROWS:
        return None
    starts = [ptr]
    for stride, size in dims:
        starts = [start + k * stride for start in starts for k in range(size)]
    return Pattern(tuple(sorted(starts)), step, count, run)


def is_approximated(ptr: int, layout: Layout) -> bool:
    """Whether `pattern` gave up on this layout (too many rows) rather than found it dense."""
    return pattern(ptr, layout) is None and bool(_dims(layout)[0])


def _runs_meeting(start: int, step: int, count: int, run: int, lo: int, hi: int) -> tuple[int, int]:
    """The index range [first, last] of the runs `start + i * step + [0, run)` that meet [lo, hi)."""
    return max(0, (lo - run - start) // step + 1), min(count - 1, (hi - start - 1) // step)


def _row_meets_interval(start: int, step: int, count: int, run: int, lo: int, hi: int) -> bool:
    first, last = _runs_meeting(start, step, count, run, lo, hi)
    return first <= last


def _rows_overlap(p: tuple[int, int, int, int], q: tuple[int, int, int, int], lo: int, hi: int) -> int:
    """Whether rows p and q, each (start, step, count, run), share a byte in [lo, hi)."""
    p_start, p_step, p_count, p_run = p
    q_start, q_step, q_count, q_run = q
    first, last = _runs_meeting(p_start, p_step, p_count, p_run, lo, hi)
    if first > last:
        return DISJOINT
    # The first and last runs of p may stick out of the window: test them clipped.
    for i in {first, last}:
        a = p_start + i * p_step
        if _row_meets_interval(q_start, q_step, q_count, q_run, max(a, lo), min(a + p_run, hi)):
            return OVERLAP
    first, last = first + 1, last - 1  # the runs between lie inside the window
    if first > last:
        return DISJOINT
    d = p_start - q_start
    # p's run i meets q's run j iff d + i * p_step - j * q_step lies in (-p_run, q_run).
    if p_step == q_step:
        k_low, k_high = (-p_run - d) // p_step + 1, (q_run - d - 1) // p_step
        return OVERLAP if max(k_low, first - (q_count - 1)) <= min(k_high, last) else DISJOINT
    g = gcd(p_step, q_step)
    if (-p_run - d) // g + 1 > (q_run - d - 1) // g:
        return DISJOINT  # no combination of the steps lands in the interval
    if last - first + 1 <= q_count and last - first + 1 <= MAX_SCAN:
        for i in range(first, last + 1):
            a = p_start + i * p_step
            if _row_meets_interval(q_start, q_step, q_count, q_run, a, a + p_run):
                return OVERLAP
        return DISJOINT
    if q_count <= MAX_SCAN:
        p_inner = (p_start + first * p_step, p_step, last - first + 1, p_run)
        for j in range(q_count):
            b = q_start + j * q_step
            if _row_meets_interval(*p_inner, b, b + q_run):
                return OVERLAP
        return DISJOINT
    return MAY_OVERLAP


def _rows(extent: tuple[int, int], shape: Pattern | None) -> tuple[tuple[int, ...], int, int, int]:
    """(starts, step, count, run) of an access; a dense extent is one row of one run."""
    if shape is None:
        ptr, size = extent
        return (ptr,), size + 1, 1, size
    return shape.starts, shape.step, shape.runs_per_row, shape.run


def overlap(
    a_extent: tuple[int, int],
    a_shape: Pattern | None,
    b_extent: tuple[int, int],
    b_shape: Pattern | None,
    lo: int,
    hi: int,
) -> int:
    """Whether accesses a and b share a byte in [lo, hi); each is its extent (ptr, size) and its
    pattern (None: the whole extent). DISJOINT, OVERLAP or MAY_OVERLAP."""
    lo = max(lo, a_extent[0], b_extent[0])
    hi = min(hi, a_extent[0] + a_extent[1], b_extent[0] + b_extent[1])
    if lo >= hi:
        return DISJOINT
    if a_shape is None and b_shape is None:
        return OVERLAP
    a_starts, a_step, a_count, a_run = _rows(a_extent, a_shape)
    b_starts, b_step, b_count, b_run = _rows(b_extent, b_shape)
    b_length = (b_count - 1) * b_step + b_run
    a_length = (a_count - 1) * a_step + a_run
    answer = DISJOINT
    for a_start in a_starts:
        # Only b's rows whose span meets this row's span can share a byte with it.
        begin = bisect_left(b_starts, a_start - b_length + 1)
        for b_start in b_starts[begin:]:
            if b_start >= a_start + a_length:
                break
            found = _rows_overlap((a_start, a_step, a_count, a_run), (b_start, b_step, b_count, b_run), lo, hi)
            if found == OVERLAP:
                return OVERLAP
            answer = max(answer, found)
    return answer
