"""What the mode's hot-path shortcuts must keep: stacks start at the op's caller, and ops
run exactly as torch runs them."""

from __future__ import annotations

from typing import Any

import torch

from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.stacks import resolve


class StackRecorder:
    def __init__(self) -> None:
        self.stacks: list[Any] = []

    def kernel_launched(self, stream: int, operator: str, accesses: Any, stack: Any = None) -> None:
        self.stacks.append(stack)


def _mode(tracker: Any, errors: list[BaseException]) -> SanitizerMode:
    return SanitizerMode(
        tracker,
        is_device=lambda t: True,
        is_pinned=lambda t: False,
        current_stream=lambda: 0,
        on_internal_error=errors.append,
    )


def _user_op(x: torch.Tensor) -> None:
    x.add_(1)


def test_stack_starts_at_the_frame_that_called_the_op():
    rec, errors = StackRecorder(), []
    x = torch.zeros(4)
    with _mode(rec, errors):
        _user_op(x)
    assert errors == []
    frames = resolve(rec.stacks[-1])
    assert frames[-1].function == "_user_op"
    assert frames[-2].function == "test_stack_starts_at_the_frame_that_called_the_op"
    assert not any(f.filename.endswith("mode.py") for f in frames)


def test_ops_give_torch_results_under_the_mode():
    rec, errors = StackRecorder(), []
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(3)
    expected = (a * b + 1, torch.topk(a, 2, dim=1), a.sum(dim=0))
    with _mode(rec, errors):
        got = (a * b + 1, torch.topk(a, 2, dim=1), a.sum(dim=0))
    assert errors == []
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[1].values, expected[1].values) and torch.equal(got[1].indices, expected[1].indices)
    assert torch.equal(got[2], expected[2])
    assert len(rec.stacks) == 4
