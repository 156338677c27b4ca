"""Items of the caller's data (`buf = self.buffers[k]`, or a getter's `buf = self.store.get(k)`)
written on a side stream outlive the call: still pending when it returns, with no join, the
caller's next use races with them (CSL102)."""

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
                    device = {item}
                    device.data.copy_(host.data, non_blocking=True)
            {join}

        optimizer.register_step_post_hook(copy_back)
"""


ITEMS = ["self.device_copies[host]", "self.copies.device_copy(host)"]
"""An item of a container of the object, and a tensor a getter of the object hands out."""


@pytest.mark.parametrize("item", ITEMS)
def test_an_item_of_the_objects_data_left_written_on_a_side_stream_is_flagged(item: str) -> None:
    source = HOOK.format(join="self.other.record_event().wait()", item=item)
    found = lint_source(textwrap.dedent(source), "m.py")
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
@pytest.mark.parametrize("item", ITEMS)
def test_a_join_before_returning_orders_it(join: str, item: str) -> None:
    assert findings(HOOK.format(join=join, item=item)) == []


def test_a_name_rebound_to_a_tensor_of_its_own_is_no_longer_the_callers() -> None:
    source = HOOK.format(join="device = torch.zeros(1, device='cuda')", item=ITEMS[0])
    assert findings(source) == []


def test_a_host_value_a_getter_hands_out_is_not_written_by_binding_it() -> None:
    source = HOOK.format(join="", item=ITEMS[1]).replace(
        "device.data.copy_(host.data, non_blocking=True)", "self.log.append(self.copies.index_of(host))"
    )
    assert findings(source) == []
