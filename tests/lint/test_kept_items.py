"""Memory a function frees that it did not allocate, and tensors kept in a local list: a
caller's tensor freed with `resize_(0)` goes back to the pool of the stream current at entry
(where the caller allocated it), whichever stream is current at the free; the items of a local
list carry what is known of the tensors appended (by position in a tuple), for a later loop
over it; a `set()` or a `dict()` is a container, never a tensor."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


STASH = """
import torch

def stash(tensors, d2h):
    d2h.wait_stream(torch.cuda.current_stream())
    kept, seen = [], set()
    with torch.cuda.stream(d2h):
        for tensor in tensors:
            host = torch.empty(tensor.shape, device="cpu", pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            {record}
            kept.append({item})
        {sync}
        for {target} in kept:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                tensor.untyped_storage().resize_(0)
    return kept
"""


@pytest.mark.parametrize(("item", "target"), [("tensor", "tensor"), ("(tensor, host)", "tensor, _")])
def test_a_tensor_freed_from_a_list_while_a_side_stream_copies_it_is_flagged(item: str, target: str) -> None:
    """Freed on the side stream, but the block is the caller's, from the entry stream's pool."""
    assert findings(STASH.format(item=item, target=target, record="", sync="")) == [("CSL201", 10)]


@pytest.mark.parametrize(("record", "sync"), [("tensor.record_stream(d2h)", ""), ("", "d2h.synchronize()")])
def test_a_recorded_or_waited_copy_is_not(record: str, sync: str) -> None:
    """The item is what was appended: recorded before, or waited for by the host after."""
    assert findings(STASH.format(item="(tensor, host)", target="tensor, _", record=record, sync=sync)) == []


def test_a_caller_tensor_freed_inside_the_side_block_is_judged_against_the_entry_stream() -> None:
    source = """
    import torch

    def stash(tensor, d2h, host):
        d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(d2h):
            host.copy_(tensor, non_blocking=True)
            tensor.untyped_storage().resize_(0)
    """
    assert findings(source) == [("CSL201", 7)]


def test_a_set_is_no_tensor_its_membership_test_reads_nothing_on_the_device() -> None:
    """`x not in seen` on a `set()` is a host test, no sync: it orders nothing."""
    source = """
    import torch

    def stash(tensor, d2h, host):
        d2h.wait_stream(torch.cuda.current_stream())
        seen = set()
        with torch.cuda.stream(d2h):
            host.copy_(tensor, non_blocking=True)
            if 1 not in seen:
                tensor.untyped_storage().resize_(0)
    """
    assert findings(source) == [("CSL201", 8)]
