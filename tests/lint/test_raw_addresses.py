"""Memory handed out by address (`x.data_ptr()`) and work launched on a stream given by its raw
handle (`context.execute_async_v3(s.cuda_stream)`): code the analysis cannot read (a TensorRT
engine, a C++ extension) runs on that stream and may read and write every tensor whose address
was handed out, so they need the same ordering as a `with torch.cuda.stream(s):` block would."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

ENGINE = """
import torch


class Engine:
    def __init__(self, context):
        self.context = context
        self.stream = torch.cuda.Stream()

    def forward(self, x: torch.Tensor):
        inp = torch.relu(x)
        out = torch.empty_like(inp)
        self.context.set_tensor_address("in", inp{index}.data_ptr())
        self.context.set_tensor_address("out", out.data_ptr())
        {before}
        self.context.execute_async_v3({handle})
        {after}
        return out
"""
LAUNCH, RETURN = 16, 18


def findings(
    before: str = "pass", after: str = "pass", handle: str = "self.stream.cuda_stream", index: str = ""
) -> list[tuple[str, int, str]]:
    source = textwrap.dedent(ENGINE.format(before=before, after=after, handle=handle, index=index))
    return sorted((f.code, f.line, f.message.split("'")[1]) for f in lint_source(source, "m.py"))


@pytest.mark.parametrize("index", ["", "[1:]", ".contiguous()"])
def test_an_engine_on_a_private_stream_reads_inputs_and_writes_outputs_unordered(index: str) -> None:
    assert findings(index=index) == [
        ("CSL101", LAUNCH, "inp"),  # written on the current stream, read by the engine
        ("CSL101", LAUNCH, "out"),  # allocated on the current stream, first used by the engine
        ("CSL102", RETURN, "out"),  # written by the engine, used by the caller after the return
    ]


def test_a_fork_before_and_a_join_after_order_it() -> None:
    fork = "self.stream.wait_stream(torch.cuda.current_stream())"
    join = "torch.cuda.current_stream().wait_stream(self.stream)"
    assert findings(before=fork, after=join) == []


def test_a_host_sync_of_the_engines_stream_joins_its_outputs() -> None:
    assert [code for code, _, _ in findings(after="self.stream.synchronize()")] == ["CSL101", "CSL101"]


def test_an_engine_on_the_current_stream_is_ordered_with_it() -> None:
    assert findings(handle="torch.cuda.current_stream().cuda_stream") == []


def test_addresses_handed_out_without_a_launch_on_a_handle_are_not_accesses() -> None:
    assert findings(handle="None") == []
