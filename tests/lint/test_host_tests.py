"""Tests a CUDA device or plain Python decides: another accelerator's device type is never
current, `k in seen` looks a key up on the host, and a helper annotated `-> int` returns no
tensor. None of them is a sync that would order the caller's tensors."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


@pytest.mark.parametrize(
    ("test", "flagged"),
    [
        ('self.device_type != "npu"', False),  # True on CUDA: the wait always runs
        ('is_npu() and self.device_type == "npu"', True),  # False on CUDA: the wait never runs
        ('self.mode != "npu"', True),  # no device type: either way
    ],
)
def test_another_accelerators_device_type_is_decided_on_cuda(test: str, flagged: bool) -> None:
    source = f"""
    import torch

    def offload(self, x: torch.Tensor):
        if {test}:
            self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            y = x * 2
        torch.cuda.current_stream().wait_stream(self.side)
    """
    assert bool(findings(source)) == flagged


OFFLOAD = """
import torch

def nbytes(t: torch.Tensor) -> {returns}:
    return t.numel() * t.element_size()

def pack(self, x: torch.Tensor):
    found = {value}
    if found {test}:
        return None
    with torch.cuda.stream(self.side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(self.side)
"""


@pytest.mark.parametrize(
    ("value", "test"),
    [
        ("key_of(x)", "in self.seen"),  # a dict lookup: no kernel
        ("nbytes(x)", "< 1024"),  # a Python int
    ],
)
def test_host_values_tested_do_not_sync_the_callers_stream(value: str, test: str) -> None:
    assert findings(OFFLOAD.format(returns="int", value=value, test=test)) == [("CSL101", 12)]


def test_a_helper_result_that_may_be_a_tensor_tested_is_taken_as_a_sync() -> None:
    """Annotated as a tensor, the result tested is copied to the host, which waits for the
    current stream: the caller's tensor is ready before the block."""
    assert findings(OFFLOAD.format(returns="torch.Tensor", value="nbytes(x)", test="< 1024")) == []
