"""The strided-overlap test must agree with the bytes themselves: random layouts (slices, steps,
transposes, broadcasts, as_strided overlaps) against a byte-set shadow, inside random windows."""

from __future__ import annotations

import random

import pytest

from csan_lint.runtime import extents
from csan_lint.runtime.extents import DISJOINT, MAY_OVERLAP, OVERLAP, overlap, pattern


def _bytes(ptr: int, layout: extents.Layout) -> set[int]:
    item, sizes, strides = layout
    offsets = [0]
    for size, stride in zip(sizes, strides, strict=True):
        offsets = [o + k * stride for o in offsets for k in range(size)]
    return {ptr + o * item + b for o in offsets for b in range(item)}


def _access(ptr: int, layout: extents.Layout) -> tuple[tuple[int, int], extents.Pattern | None]:
    touched = _bytes(ptr, layout)
    low, high = min(touched), max(touched) + 1
    return (low, high - low), pattern(low, layout)


def _random_layout(rng: random.Random) -> tuple[int, extents.Layout]:
    item = rng.choice((1, 2, 4))
    ndim = rng.randint(1, 3)
    sizes = tuple(rng.randint(1, 5) for _ in range(ndim))
    strides = tuple(rng.choice((0, 1, 2, 3, 4, 5, 7, 8, 12)) for _ in range(ndim))
    return rng.randrange(0, 40), (item, sizes, strides)


@pytest.mark.parametrize("seed", range(400))
def test_overlap_matches_the_bytes(seed):
    rng = random.Random(seed)
    a_ptr, a_layout = _random_layout(rng)
    b_ptr, b_layout = _random_layout(rng)
    lo = rng.randrange(0, 60)
    hi = rng.randrange(lo + 1, 200)
    a, b = _bytes(a_ptr, a_layout), _bytes(b_ptr, b_layout)
    expected = bool({x for x in a & b if lo <= x < hi})
    answer = overlap(*_access(a_ptr, a_layout), *_access(b_ptr, b_layout), lo, hi)
    assert answer in (DISJOINT, OVERLAP)  # small layouts are never approximated
    assert bool(answer) == expected


def test_column_blocks_and_interleaved_halves_are_disjoint():
    # A 4 x 6 row-major float matrix at 1000: columns 0..2 against 3..5.
    left = ((1000, (3 * 6 + 3) * 4), pattern(1000, (4, (4, 3), (6, 1))))
    right = ((1012, (3 * 6 + 3) * 4), pattern(1012, (4, (4, 3), (6, 1))))
    assert overlap(*left, *right, 0, 10**6) == DISJOINT
    # x[0::2] and x[1::2] of a million floats: one row each, no scan.
    even = ((0, (2 * 499_999 + 1) * 4), pattern(0, (4, (500_000,), (2,))))
    odd = ((4, (2 * 499_999 + 1) * 4), pattern(4, (4, (500_000,), (2,))))
    assert overlap(*even, *odd, 0, 10**8) == DISJOINT
    assert overlap(*even, (8, 4), None, 0, 10**8) == OVERLAP


def test_dense_layouts_need_no_pattern():
    assert pattern(0, (4, (3, 5), (5, 1))) is None  # contiguous
    assert pattern(0, (4, (3, 5), (1, 3))) is None  # a transpose of a dense block
    assert pattern(0, (4, (3, 5), (0, 1))) is None  # broadcast rows: the same bytes
    assert not extents.is_approximated(0, (4, (3, 5), (1, 3)))


def test_too_many_rows_or_scans_are_counted_approximations():
    huge = (4, (extents.MAX_ROWS + 1, 2, 2), (8, 4, 1))  # rows of 2 runs, more rows than the cap
    assert pattern(0, huge) is None and extents.is_approximated(0, huge)
    n = extents.MAX_SCAN + 10  # more runs than a scan takes, even without the clipped ends
    every_2 = ((0, (2 * (n - 1) + 1) * 4), pattern(0, (4, (n,), (2,))))
    every_3 = ((4, (3 * (n - 1) + 1) * 4), pattern(4, (4, (n,), (3,))))
    assert overlap(*every_2, *every_3, 0, 10**8) == MAY_OVERLAP
