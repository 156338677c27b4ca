"""Emulation gaps are named as such: the emulation's own `EmulationGap`, and the CPU build's
errors for CUDA work that reach a test when the emulation did not intercept a call."""

from __future__ import annotations

import pytest
import torch

from csan_lint.runtime.emulation.gaps import EmulationGap, gap_of

no_real_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's errors need a CPU-only torch")


def test_the_emulation_raises_a_gap_that_names_the_op_and_the_call(device):
    event = torch.cuda.Event(interprocess=True)
    with pytest.raises(EmulationGap) as raised:
        event.ipc_handle()
    assert isinstance(raised.value, RuntimeError)  # code that catches CUDA's errors still does
    assert raised.value.op == "interprocess events (`torch.cuda.Event.ipc_handle`)"
    gap = gap_of(raised.value)
    assert gap is not None
    assert gap.startswith(
        "the emulated device does not support interprocess events (`torch.cuda.Event.ipc_handle`), "
        "called as `event.ipc_handle()` at test_gaps.py:"
    )
    assert gap.endswith(": please report it (https://github.com/csan-lint/csan-lint/issues)")


@no_real_gpu
def test_a_cpu_build_error_that_the_emulation_let_through_is_a_gap_at_the_programs_call():
    with pytest.raises(RuntimeError) as raised:  # no emulation: torch's own answer
        torch.empty(2, pin_memory=True)
    assert "pinned memory" in str(raised.value) and not isinstance(raised.value, EmulationGap)
    gap = gap_of(raised.value)
    assert gap is not None
    assert gap.startswith(
        "the emulated device does not support pinned host memory here, called as "
        "`torch.empty(2, pin_memory=True)` at test_gaps.py:"
    )


def test_a_missing_cuda_binding_is_named():
    with pytest.raises(AttributeError) as raised:
        torch._C._cuda_no_such_binding  # noqa: B018 (the attribute access is the error)
    gap = gap_of(raised.value)
    assert gap is not None and "does not support `torch._C._cuda_no_such_binding`" in gap


def test_the_programs_own_errors_are_not_gaps():
    for error in (ValueError("boom"), RuntimeError("Expected all tensors to be on the same device"), AssertionError()):
        assert gap_of(error) is None
