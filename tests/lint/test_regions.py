"""Parts of one tensor reached by basic indices (lint/regions.py): writes and reads of disjoint
parts on two streams need no ordering (a halo exchange fills a padded buffer's border rows on
one stream and its interior on another); overlapping or unknown parts still do."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.regions import Region, disjoint, mentions, region_names, region_of

HALO = """
import torch

def halo(src, s1, s3, n):
    pad = torch.empty([4, n + 2, 8], device="cuda")
    s1.wait_stream(torch.cuda.current_stream())
    s3.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s3):
        pad[:, 1:n + 1].copy_(src)
    with torch.cuda.stream(s1):
        {use}
    torch.cuda.current_stream().wait_stream(s1)
    torch.cuda.current_stream().wait_stream(s3)
    return pad
"""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


@pytest.mark.parametrize(
    "use",
    [
        "pad[:, :1].zero_()",
        "pad[:, n + 1:n + 2].zero_()",
        "pad[:, 0].add_(1)",
        "top = pad[:, :1]\n        top.mul_(2)",
        "edge = pad[:, n + 1]\n        y = edge * 2",
    ],
)
def test_a_part_the_other_stream_never_touches_needs_no_wait(use: str) -> None:
    assert findings(HALO.format(use=use)) == []


@pytest.mark.parametrize(
    "use",
    [
        "pad[:, n].add_(1)",  # the interior's last row
        "pad[:, 1:2].zero_()",
        "pad.zero_()",  # all of it
        "pad[:, i].zero_()",  # an index the analysis cannot place
        "pad[..., 0].zero_()",  # past `...`: unknown
        "pad[:, ::2].zero_()",  # a step
    ],
)
def test_a_part_that_may_overlap_still_races(use: str) -> None:
    assert findings(HALO.format(use=use)) == [("CSL102", 11)]


def test_an_alias_of_a_part_that_may_overlap_races_where_it_is_used() -> None:
    assert findings(HALO.format(use="mid = pad[:, 2:3]\n        mid.mul_(2)")) == [("CSL102", 12)]


def test_a_write_to_one_part_keeps_the_other_parts_last_writes() -> None:
    """After the border rows are written on s1, the interior is still s3's: reading all of the
    buffer on s1 races with s3's write."""
    source = HALO.format(use="pad[:, :1].zero_()\n        y = pad * 2")
    assert findings(source) == [("CSL102", 12)]


def _region(code: str):
    return region_of(cst.parse_expression(code))


@pytest.mark.parametrize(
    ("a", "b", "apart"),
    [
        ("x[0]", "x[1]", True),
        ("x[:, :k]", "x[:, k:]", True),
        ("x[:, 2 * k:2 * k + 1]", "x[:, 2 * k + 1]", True),
        ("x[i]", "x[i + 1]", True),
        ("x[i]", "x[j]", False),
        ("x[-1]", "x[0]", False),
        ("x[:, :k + 1]", "x[:, k:]", False),
        ("x", "x[0]", False),
    ],
)
def test_disjoint_regions(a: str, b: str, apart: bool) -> None:
    assert disjoint(_region(a), _region(b)) is apart
    assert disjoint(_region(b), _region(a)) is apart


BRANCHES = """
import torch

def halo(src, s1, s3, n, nhwc):
    pad = torch.empty([4, n + 2, n + 2], device="cuda")
    s1.wait_stream(torch.cuda.current_stream())
    s3.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s3):
        if nhwc:
            pad[:, 1:n + 1, :].copy_(src)
        else:
            pad[:, :, 1:n + 1].copy_(src)
    with torch.cuda.stream(s1):
        if nhwc:
            top = pad[:, :1, :]
        else:
            top = pad[:, :, :1]
        top.zero_()
    torch.cuda.current_stream().wait_stream(s1)
    torch.cuda.current_stream().wait_stream(s3)
    return pad
"""


def test_an_alias_inherits_only_the_accesses_of_its_own_path() -> None:
    """Each layout writes its own interior and takes its own border: the other layout's write,
    made on a path the test rules out, overlaps the border but never runs with it."""
    assert findings(BRANCHES) == []


def test_a_layout_mixing_both_paths_still_races() -> None:
    assert findings(BRANCHES.replace("top = pad[:, :, :1]", "top = pad[:, :1, :]")) == [("CSL102", 18)]


def test_saving_tensors_for_backward_reads_none_of_their_data() -> None:
    source = """
    import torch

    class Halo(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, s3):
            pad = torch.empty_like(src)
            s3.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s3):
                pad.copy_(src)
            ctx.save_for_backward(pad, src)
            torch.cuda.current_stream().wait_stream(s3)
            return pad
    """
    assert findings(source) == []


def test_a_part_indexed_by_a_loop_variable_is_not_apart_once_it_moves_on() -> None:
    """`out[i]` written on a side stream in one pass is `out[i - 1]` in the next: apart from
    `out[i - 1]` in the same pass, not across the rebinding of `i`."""
    source = """
    import torch

    def steps(xs, side, n):
        out = [None] * n
        for i in range(n):
            if i < n - 1:
                with torch.cuda.stream(side):
                    y = xs[i] * 2
                    out[i] = y
            if i > 0:
                out[i - 1].squeeze_(-1)
        return out
    """
    assert ("CSL102", 12) in findings(source)


def _read_region(code: str) -> Region:
    region = region_of(cst.parse_expression(code))
    assert region is not None
    return region


@pytest.mark.parametrize(
    ("index", "names"),
    [
        ("buf[i:n + 1]", {"i", "n"}),
        ("buf[:len(x)]", {"len", "x"}),
        ("buf[self.lo:self.hi]", {"self.lo", "self.hi"}),
        ("buf[:f(k=m).n]", {"f", "m"}),
        ("buf[:4]", set()),
    ],
)
def test_the_names_a_region_reads(index: str, names: set[str]) -> None:
    assert region_names(_read_region(index)) == names


@pytest.mark.parametrize(
    ("index", "name", "mentioned"),
    [
        ("buf[i:n + 1]", "n", True),
        ("buf[:len(x)]", "x", True),
        ("buf[self.lo:]", "self", True),
        ("buf[self.lo:]", "lo", False),
        ("buf[:n2]", "n", False),
        ("buf[:f(k=m)]", "k", False),
    ],
)
def test_a_rebinding_invalidates_the_regions_that_read_the_name(index: str, name: str, mentioned: bool) -> None:
    assert mentions(_read_region(index), name) is mentioned
    assert not mentions(None, name)
