"""A parameter annotated as a collection of streams (`streams: list[torch.cuda.Stream]`): an item
picked by a computed key is one of its items, ordered by a loop in which each item waits."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

ROUND_ROBIN = """
import torch


def run(x: torch.Tensor, streams: {annotation}, n: int) -> None:
    y = x * 2
    for s in streams:
        {wait}
    for i in range(n):
        stream = streams[i % len(streams)]
        with torch.cuda.stream(stream):
            y.add_(1)
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
"""


def findings(annotation: str, wait: str) -> list[str]:
    source = textwrap.dedent(ROUND_ROBIN.format(annotation=annotation, wait=wait))
    return [f"{f.code}:{f.line} {f.message}" for f in lint_source(source, "m.py")]


@pytest.mark.parametrize("annotation", ["list[torch.cuda.Stream]", "Sequence[torch.Stream]", "tuple[Stream, ...]"])
def test_each_item_waited_orders_the_item_picked_later(annotation: str) -> None:
    assert findings(annotation, "s.wait_stream(torch.cuda.current_stream())") == []


def test_without_the_waits_the_item_is_named_as_the_user_would() -> None:
    [found] = findings("list[torch.cuda.Stream]", "pass")
    assert found.startswith(
        "CSL101:12 'y' was written on the current stream and is written on side stream 'streams[...]'"
    )


def test_a_list_of_anything_else_is_no_collection_of_streams() -> None:
    """Its item is a stream only by its name, one the loop of waits does not order."""
    found = findings("list[int]", "s.wait_stream(torch.cuda.current_stream())")
    assert found and all("side stream 'stream'" in message for message in found)


POOLS = """
import torch
from typing import List


def run(x: torch.Tensor, comm: List[torch.cuda.Stream], copy: List[torch.cuda.Stream], n: int):
    pool = comm + copy
    current = torch.cuda.current_stream()
    {fork}
    out = torch.empty_like(x)
    for i in range(n):
        with comm[i % len(comm)]:
            out.add_(x)
    for st in pool:
        torch.cuda.current_stream().wait_stream(st)
    return out
"""


def pool_findings(fork: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(POOLS.format(fork=fork))
    return sorted((finding.code, finding.line) for finding in lint_source(source, "m.py"))


def test_an_item_of_a_sum_of_collections_is_an_item_of_either() -> None:
    """Primus-Turbo's `stream_pool = gemm_pool + comm_pool + copy_pool`: each item of the sum
    waiting on the current stream orders every item of each pool, and joining each joins them."""
    assert pool_findings("for st in pool:\n        st.wait_stream(current)") == []


def test_without_the_fork_the_pools_item_races() -> None:
    assert ("CSL101", 13) in pool_findings("pass")
