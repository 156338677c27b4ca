"""`t.record_stream(s)` on the stream that allocated `t` protects nothing: the allocator waits
for that stream anyway, and the use on another stream the call was written for is left
unprotected (CSL201 at the call)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


ONLOAD = """
import torch

class Group:
    def _transfer(self, param, source{extra}):
        param.data = source.to(self.device, non_blocking=True)
        param.data.record_stream({recorded})
"""


def test_recording_the_stream_that_just_allocated_the_tensor_is_flagged_at_the_record() -> None:
    source = ONLOAD.format(extra="", recorded="torch.cuda.current_stream()")
    found = lint_source(textwrap.dedent(source), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL201", 7)]
    assert "'param.data' is recorded on the current stream, the stream that allocated it" in found[0].message


def test_recording_a_stream_the_caller_passed_in_is_not_flagged() -> None:
    assert findings(ONLOAD.format(extra=", compute_stream", recorded="compute_stream")) == []


def test_recording_the_consumer_after_allocating_on_a_side_stream_is_not_flagged() -> None:
    source = """
    import torch

    def prefetch(batch, copy_stream):
        with torch.cuda.stream(copy_stream):
            gpu = batch.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy_stream)
        gpu.record_stream(torch.cuda.current_stream())
        return gpu
    """
    assert findings(source) == []


def test_recording_the_side_stream_inside_its_own_block_is_flagged() -> None:
    source = """
    import torch

    def prefetch(batch, copy_stream):
        with torch.cuda.stream(copy_stream):
            gpu = batch.to("cuda", non_blocking=True)
            gpu.record_stream(torch.cuda.current_stream())
        torch.cuda.current_stream().wait_stream(copy_stream)
        return gpu
    """
    found = lint_source(textwrap.dedent(source), "m.py")
    assert ("CSL201", 7) in [(f.code, f.line) for f in found]
    assert any("recorded on side stream 'copy_stream', the stream that allocated it" in f.message for f in found)


@pytest.mark.parametrize("rebinding", ["param.data = self.cpu_copy[param]", "param.data = source"])
def test_memory_not_allocated_here_is_not_judged(rebinding: str) -> None:
    source = f"""
    import torch

    def swap(self, param, source):
        {rebinding}
        param.data.record_stream(torch.cuda.current_stream())
    """
    assert findings(source) == []


def test_rebinding_the_name_forgets_the_allocation_of_its_data() -> None:
    source = """
    import torch

    def post_reduce(self, param, grad):
        grad.data = grad.data.to(dtype=param.dtype)
        if param.sharded:
            grad = param.shard.data
        self.host.copy_(grad.data, non_blocking=True)
        grad.data.record_stream(torch.cuda.current_stream())
    """
    assert findings(source) == []


def test_a_local_tensor_made_and_recorded_on_the_entry_stream_is_not_judged() -> None:
    """Its uses, here and in the caller, are all on that stream: nothing to protect."""
    source = """
    import torch

    def test_record(values):
        j = values.to("cuda")
        j.record_stream(torch.cuda.current_stream())
    """
    assert findings(source) == []


SENT = """
import torch

def send(comm, side):
    out = torch.empty(8, device="cuda")
    entry = torch.cuda.current_stream()
    side.wait_stream(entry)
    with torch.cuda.stream(side):
        out.record_stream({recorded})
        comm.send(out)
"""


def test_a_local_tensor_recorded_on_its_own_stream_and_used_on_another_is_flagged_at_the_record() -> None:
    """The record, before the use, was written for the side stream's use and protects nothing
    there (the release at the return is reported at the use)."""
    found = lint_source(textwrap.dedent(SENT.format(recorded="entry")), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL201", 9), ("CSL201", 10)]
    assert "'out' is recorded on the current stream, the stream that allocated it" in found[0].message


def test_a_local_tensor_recorded_on_the_stream_that_uses_it_is_not_flagged() -> None:
    assert findings(SENT.format(recorded="side")) == []
