"""A pinned host buffer kept on `self` (often through views of it bound in `__init__`) is
re-staged on the host and copied to the device with `non_blocking=True` on every call: the next
call's host writes overwrite bytes the previous call's copy may not have read yet (CSL302), unless
a host sync orders them on every path. Only what the analysis can tell is flagged: a buffer that
may be swapped between calls, or a view that may not overlap the copied bytes, is not."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

STAGING = """
import torch

class Staging:
    def __init__(self, n):
        self.host = torch.empty(2 * n, dtype=torch.uint8, pin_memory=True)
        self.lengths = {view}
        self.device = torch.empty(2 * n, dtype=torch.uint8, device="cuda")

    def send(self, lengths, n, flag):
        {before}
        self.lengths[:n] = lengths
        self.device.copy_(self.host, {blocking})
        {after}
"""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


def staging(
    view: str = "self.host[:n].view(torch.int32)",
    before: str = "pass",
    blocking: str = "non_blocking=True",
    after: str = "pass",
) -> str:
    return STAGING.format(view=view, before=before, blocking=blocking, after=after)


@pytest.mark.parametrize(
    "view",
    ["self.host[:n].view(torch.int32)", "self.host.narrow(0, 0, n)", "(self.host[n:]).view(torch.int32)[:4]",
     "self.host[0]", "self.host.T"],
)  # fmt: skip
def test_a_view_of_a_buffer_kept_on_self_restaged_before_the_copy_is_flagged(view: str) -> None:
    assert findings(staging(view=view)) == [("CSL302", 12)]


def test_the_message_says_the_previous_call_may_still_be_reading() -> None:
    (finding,) = lint_source(textwrap.dedent(staging()), "m.py")
    assert finding.message == (
        "pinned buffer 'self.host' is overwritten on the host through its view 'self.lengths' while the "
        "previous call's non-blocking copy out of it (line 13) may still be running on the current stream"
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("pass", "torch.cuda.current_stream().synchronize()"),
        ("torch.cuda.synchronize()", "pass"),
        ("pass", "self.done = torch.cuda.Event(); self.done.record()\n        self.done.synchronize()"),
        ("self.done.synchronize()", "self.done.record()"),
        ("pass", "print(self.device.sum().item())"),
        ("pass", "self.device.cpu()"),
        ("pass", "return self.host"),
    ],
)
def test_a_host_sync_on_every_path_between_the_copy_and_the_next_write_is_safe(before: str, after: str) -> None:
    assert findings(staging(before=before, after=after)) == []


def test_a_sync_on_some_paths_only_leaves_the_race() -> None:
    after = "if flag:\n            torch.cuda.synchronize()"
    assert findings(staging(after=after)) == [("CSL302", 12)]


@pytest.mark.parametrize("blocking", ["non_blocking=False", "False"])
def test_a_blocking_copy_is_safe(blocking: str) -> None:
    assert findings(staging(blocking=blocking)) == []


@pytest.mark.parametrize(
    "view", ["self.host.reshape(2, n)", "self.host.contiguous()", "self.host[index]", "self.host.clone()",
             "torch.empty(n, pin_memory=True)"]
)  # fmt: skip
def test_what_may_be_a_copy_is_not_a_view(view: str) -> None:
    assert findings(staging(view=view)) == []


def test_the_base_itself_restaged_in_the_same_method_is_flagged() -> None:
    source = staging().replace("self.lengths[:n] = lengths", "self.host.fill_(0)")
    assert findings(source) == [("CSL302", 12)]


def test_views_bound_in_another_method_alias_their_base_too() -> None:
    source = staging().replace(
        "self.lengths = self.host[:n].view(torch.int32)", "self.lengths = None\n        self.allocate(n)"
    )
    source += "\n    def allocate(self, n):\n        self.lengths = self.host[:n].view(torch.int32)\n"
    assert findings(source) == [("CSL302", 13)]


def test_a_write_through_a_view_after_the_copy_in_the_same_call_is_flagged_as_such() -> None:
    source = staging(after="self.lengths.zero_()")
    finding = next(f for f in lint_source(textwrap.dedent(source), "m.py") if f.line == 14)
    assert "while the non-blocking copy out of it (line 13)" in finding.message


def test_buffers_made_anew_on_each_call_do_not_meet() -> None:
    source = staging(before="self.host = torch.empty(2 * n, dtype=torch.uint8, pin_memory=True)")
    assert findings(source.replace("self.lengths[:n] = lengths", "self.host[:n] = lengths")) == []
    local = staging().replace("self.lengths[:n] = lengths", "host = torch.empty(n, pin_memory=True); host[:] = 1")
    assert findings(local.replace("copy_(self.host,", "copy_(host,")) == []


def test_a_copy_out_of_one_view_and_a_write_to_another_are_not_known_to_overlap() -> None:
    source = staging().replace("copy_(self.host,", "copy_(self.tail,")
    source = source.replace("        self.device =", "        self.tail = self.host[n:]\n        self.device =")
    assert findings(source) == []


DOUBLE_BUFFERED = """
import torch

class Staging:
    def __init__(self, n):
        self.front = torch.empty(n, pin_memory=True)
        self.back = torch.empty(n, pin_memory=True)
        self.buffers = [torch.empty(n, pin_memory=True) for _ in range(2)]
        self.turn = 0
        self.device = torch.empty(n, device="cuda")

    def flip(self):
        self.front, self.back = self.back, self.front

    def send_swapped(self, values):
        self.front[:] = values
        self.device.copy_(self.front, non_blocking=True)

    def send_alternating(self, values):
        staging = self.buffers[self.turn]
        self.turn = 1 - self.turn
        staging[:] = values
        self.device.copy_(staging, non_blocking=True)
"""


def test_double_buffering_the_analysis_cannot_follow_is_trusted() -> None:
    assert findings(DOUBLE_BUFFERED) == []


def test_a_host_sync_in_another_method_may_run_between_calls() -> None:
    source = staging() + "\n    def wait(self):\n        torch.cuda.current_stream().synchronize()\n"
    assert findings(source) == []
    assert findings(source.replace(".synchronize()", ".query()")) == [("CSL302", 12)]


@pytest.mark.parametrize(
    ("view", "write"),
    [
        ("self.host[:n].view(torch.int32)", "lengths_view = self.lengths\n        lengths_view[:n] = lengths"),
        ("ctypes.cast(self.host.data_ptr(), ctypes.POINTER(ctypes.c_int32))", "self.lengths[0] = n"),
        ("ctypes.cast(self.host.data_ptr(), ctypes.POINTER(ctypes.c_int32))", "raw = self.lengths\n        raw[0] = n"),
    ],
)
def test_a_local_name_or_a_raw_pointer_for_the_buffer_writes_it_too(view: str, write: str) -> None:
    source = "import ctypes\n" + staging(view=view).replace("self.lengths[:n] = lengths", write)
    assert findings(source) == [("CSL302", 14 if "\n" in write else 13)]


def test_a_pointer_that_is_not_into_the_buffer_is_not_a_view() -> None:
    source = staging(view="ctypes.cast(other.data_ptr(), ctypes.POINTER(ctypes.c_int32))")
    assert findings("import ctypes\n" + source.replace("self.lengths[:n] = lengths", "self.lengths[0] = n")) == []


THROUGH_VIEWS = """
import torch

class Zeroer:
    def setup(self, n):
        self.ids_host = torch.empty(n, dtype=torch.int64, pin_memory=True)
        self.ids_device = torch.empty(n, dtype=torch.int64, device="cuda")

    def zero(self, ids, idx):
        n = len(ids)
        {write} = ids
        self.ids_device[:n].copy_({source}, non_blocking=True)
"""


@pytest.mark.parametrize(
    ("write", "source", "found"),
    [
        ("self.ids_host[:n].numpy()[:]", "self.ids_host[:n]", [("CSL302", 11)]),  # views on both sides
        ("self.ids_host.numpy()[:n]", "self.ids_host", [("CSL302", 11)]),
        ("self.ids_host[:n]", "self.ids_host[:n].view(torch.int64)", [("CSL302", 11)]),
        ("self.ids_host[:n]", "self.ids_host[idx]", []),  # a gather copies into new, pageable memory
    ],
)
def test_writes_and_copies_through_views_of_a_kept_buffer_are_the_buffers(
    write: str, source: str, found: list[tuple[str, int]]
) -> None:
    assert findings(THROUGH_VIEWS.format(write=write, source=source)) == found
