"""What a static or class method of the module called on its class returns is memory made by
the call where the helper allocates it on a path the arguments allow (a parameter it tests
`is None` passed as `None`, as a name bound to `None`, or left to its default): allocated on
a side stream and handed to the caller with no `record_stream` for its stream (CSL201)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

HELPER = """
import torch

class Sync:
    @staticmethod
    def reload(cpu, buffer=None):
        if buffer is None:
            return cpu.to("cuda", non_blocking=True)
        buffer.copy_(cpu, non_blocking=True)
        return buffer

class Async(Sync):
    def reload_one(self, cpu):
        {buffer}
        with torch.cuda.stream(self.h2d):
            gpu = Sync.reload(cpu, {passed})
        torch.cuda.current_stream().wait_stream(self.h2d)
        return gpu
"""


@pytest.mark.parametrize(
    ("buffer", "passed", "flagged"),
    [
        ("pass", "", True),  # left to its default None: the helper allocates on h2d
        ("buffer = None", "buffer", True),
        ("buffer = torch.empty_like(cpu, device='cuda')", "buffer", False),  # the caller's memory comes back
    ],
)
def test_a_static_helper_of_another_class_allocates_where_its_buffer_argument_may_be_none(
    buffer: str, passed: str, flagged: bool
) -> None:
    source = textwrap.dedent(HELPER.format(buffer=buffer, passed=passed).replace("(cpu, )", "(cpu)"))
    assert ("CSL201" in {f.code for f in lint_source(source, "m.py")}) is flagged
