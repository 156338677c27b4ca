"""A tensor allocated on a side stream, kept in a container on `self` and handed to the caller
by another method (an offloader reloading on its copy stream, `tensor_pop` giving the tensors
back to autograd): the caller uses and drops it on its own stream, so the side stream's
allocator may reuse the block under the caller's kernels (CSL201), unless the hand-over
records the caller's stream or the memory comes from the caller's stream."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import CONTAINER_HANDOVER, Assumptions
from csan_lint.lint.engine import lint_source

ON = Assumptions.from_switches([(CONTAINER_HANDOVER, True)])
"""The detector is off by default (docs/analysis.md); these tests run it."""

OFFLOADER = """
import torch

class Offloader:
    def __init__(self):
        self.h2d = torch.cuda.Stream()
        self.state = {{}}

    def reload(self):
        with torch.cuda.stream(self.h2d):
            for label, cpu in self.state.items():
                gpu = {make}
                self.state[label] = gpu

    def tensor_pop(self, label):
        tensor = self.state.pop(label)
        {before}
        return tensor
"""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py", assumptions=ON))


def offloader(make: str = 'cpu.to("cuda", non_blocking=True)', before: str = "pass") -> str:
    return OFFLOADER.format(make=make, before=before)


def test_a_side_stream_allocation_kept_on_self_and_handed_back_is_flagged_where_it_is_made() -> None:
    (finding,) = lint_source(textwrap.dedent(offloader()), "m.py", assumptions=ON)
    assert (finding.code, finding.line) == ("CSL201", 12)
    assert "'gpu' was allocated on side stream 'self.h2d'" in finding.message
    assert "after 'tensor_pop' hands it over" in finding.message
    assert "handed over at line 18" in finding.message


@pytest.mark.parametrize(
    ("make", "before"),
    [
        ('cpu.to("cuda", non_blocking=True)', "tensor.record_stream(torch.cuda.current_stream())"),
        ("cpu", "pass"),  # not memory of the side stream's pool
    ],
)
def test_a_recorded_hand_over_or_memory_not_made_here_is_not_flagged(make: str, before: str) -> None:
    assert findings(offloader(make, before)) == []


def test_a_tensor_recorded_for_the_callers_stream_after_it_is_stored_is_not_flagged() -> None:
    source = offloader().replace(
        "                self.state[label] = gpu",
        "                self.state[label] = gpu\n                gpu.record_stream(self.compute)",
    )
    assert findings(source) == []


def test_a_side_stream_that_waits_for_the_callers_stream_before_allocating_is_not_flagged() -> None:
    source = offloader().replace(
        "        with torch.cuda.stream(self.h2d):",
        "        self.h2d.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.h2d):",
    )
    assert findings(source) == []


def test_a_tensor_appended_to_a_list_on_self_and_popped_by_another_method_is_flagged() -> None:
    source = offloader().replace("self.state[label] = gpu", "self.queue.append(gpu)")
    assert findings(source.replace("self.state.pop(label)", "self.queue.pop(0)")) == [("CSL201", 12)]


def test_a_container_no_method_hands_back_is_not_flagged() -> None:
    source = offloader().replace("return tensor", "self.used = tensor.sum()")
    assert findings(source) == []


def test_a_hand_over_inherited_from_a_base_class_counts() -> None:
    source = """
    import torch

    class Handler:
        def tensor_pop(self, label):
            return self.state[label]

    class Async(Handler):
        def reload(self):
            with torch.cuda.stream(self.h2d):
                for label, cpu in self.state.items():
                    gpu = cpu.to("cuda", non_blocking=True)
                    self.state[label] = gpu
    """
    assert findings(source) == [("CSL201", 12)]


HELPER = """
import torch

class Sync:
    @staticmethod
    def reload(cpu, buffer=None):
        if buffer is None:
            return cpu.to("cuda", non_blocking=True)
        buffer.copy_(cpu, non_blocking=True)
        return buffer

    def tensor_pop(self, label):
        return self.state.pop(label)

class Async(Sync):
    def reload_group(self, main):
        with torch.cuda.stream(self.h2d):
            for label, cpu in self.state.items():
                {buffer}
                gpu = Sync.reload(cpu, {passed})
                self.state[label] = gpu
"""


@pytest.mark.parametrize(
    ("buffer", "passed", "expected"),
    [
        ("pass", "", [("CSL201", 20)]),  # left to its default None: the helper allocates on h2d
        ("buffer = None", "buffer", [("CSL201", 20)]),
        # never None: the helper hands back the buffer, allocated on the caller's stream
        (
            "with torch.cuda.stream(main):\n                    buffer = torch.empty_like(cpu, device='cuda')",
            "buffer",
            [],
        ),
    ],
)
def test_a_static_helper_of_another_class_allocates_where_its_buffer_argument_may_be_none(
    buffer: str, passed: str, expected: list[tuple[str, int]]
) -> None:
    source = HELPER.format(buffer=buffer, passed=passed).replace("(cpu, )", "(cpu)")
    assert [found for found in findings(source) if found[0] == "CSL201"] == expected
