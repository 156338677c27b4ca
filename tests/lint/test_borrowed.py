"""Items of the caller's data (`buf = self.buffers[k]`) written on a side stream outlive the call:
still pending when it returns, with no join, the caller's next use races with them (CSL102)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


HOOK = """
import torch

class Offloader:
    def register(self, optimizer):
        def copy_back(optimizer, args, kwargs):
            self.copy.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.copy):
                for host in optimizer.params:
                    device = self.device_copies[host]
                    device.data.copy_(host.data, non_blocking=True)
            {join}

        optimizer.register_step_post_hook(copy_back)
"""


def test_an_item_of_the_objects_data_left_written_on_a_side_stream_is_flagged() -> None:
    found = lint_source(textwrap.dedent(HOOK.format(join="self.other.record_event().wait()")), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL102", 11)]
    assert "after 'Offloader.register.copy_back' returns" in found[0].message


@pytest.mark.parametrize(
    "join",
    [
        "self.copy.record_event().wait(torch.cuda.current_stream())",
        "self.copy.record_event().wait()",
        "torch.cuda.current_stream().wait_stream(self.copy)",
        # an event the object keeps, recorded on some path: whoever holds the object can wait
        "self.done = torch.cuda.Event()\n            if optimizer.params:\n                self.done.record(self.copy)",
    ],
)
def test_a_join_before_returning_orders_it(join: str) -> None:
    assert findings(HOOK.format(join=join)) == []


def test_a_name_rebound_to_a_tensor_of_its_own_is_no_longer_the_callers() -> None:
    source = HOOK.format(join="device = torch.zeros(1, device='cuda')")
    assert findings(source) == []
