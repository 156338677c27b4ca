"""Onloading a module's weights on a copy stream: `p.data = v` writes the tensor `p` (which
stays the caller's, now holding `v`'s memory, and releases its old memory), and the tensors a
`for` reaches through `m.parameters()`, `m.buffers()` or a container kept on `self` outlive the
call. Side-stream writes to them still pending at return, with no join, race with the forward
that reads them on the caller's stream (CSL102)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


GROUP = """
import torch

class Group:
    def onload(self, weight):
        self.stream.synchronize()
        with torch.cuda.stream(self.stream):
            for {item} in {items}:
                {write}
        {join}
"""

WRITE_LINE = 9


@pytest.mark.parametrize("items", ["self.module.parameters()", "self.module.buffers()", "self.params"])
@pytest.mark.parametrize(
    "write",
    ["p.data = p.data.to(self.device, non_blocking=True)", "p.copy_(self.host[p], non_blocking=True)"],
)
def test_a_modules_tensor_left_written_on_the_copy_stream_is_flagged(items: str, write: str) -> None:
    """The host sync at entry waits for the previous call's copies, not for this call's."""
    source = GROUP.format(item="p", items=items, write=write, join="")
    assert findings(source) == [("CSL102", WRITE_LINE)]


def test_the_message_names_the_tensor_and_the_copy_stream() -> None:
    source = GROUP.format(item="p", items="self.module.parameters()", write="p.mul_(2)", join="")
    (finding,) = lint_source(textwrap.dedent(source), "m.py")
    assert finding.message.startswith("'p' was written on side stream 'self.stream' and is used on the caller's")


def test_nested_loops_over_the_modules_of_a_group_reach_their_parameters() -> None:
    source = GROUP.format(
        item="module",
        items="self.modules",
        write="for p in module.parameters():\n                    p.data = p.data.to(self.device, non_blocking=True)",
        join="",
    )
    assert findings(source) == [("CSL102", WRITE_LINE + 1)]


@pytest.mark.parametrize("join", ["torch.cuda.current_stream().wait_stream(self.stream)", "self.stream.synchronize()"])
def test_a_join_before_return_orders_the_copies(join: str) -> None:
    source = GROUP.format(item="p", items="self.module.parameters()", write="p.mul_(2)", join=join)
    assert findings(source) == []


def test_rebinding_the_data_of_a_parameter_on_the_copy_stream_is_a_write_of_it() -> None:
    source = GROUP.format(
        item="_", items="range(1)", write="weight.data = weight.data.to(self.device, non_blocking=True)", join=""
    )
    assert findings(source) == [("CSL102", WRITE_LINE)]


def test_rebinding_the_data_to_ready_host_memory_leaves_nothing_pending() -> None:
    """`p.data = self.host[p]`: `p` now holds memory no stream writes."""
    source = GROUP.format(
        item="p", items="self.params", write="p.mul_(2)\n                p.data = self.host[p]", join=""
    )
    assert findings(source) == []


def test_a_loop_over_anything_else_binds_no_tensor_of_the_caller() -> None:
    source = GROUP.format(item="p", items="self.module.children()", write="p.weight_scale = 2", join="")
    assert findings(source) == []


def test_rebinding_the_data_releases_the_old_memory() -> None:
    """Like `del x`: the block allocated on the side stream goes back to its pool at the
    rebinding, while the current stream's kernel may still read it."""
    source = """
    import torch

    side = torch.cuda.Stream()

    def scale(src):
        with torch.cuda.stream(side):
            x = src.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        y = x * 2
        x.data = torch.empty(0, device="cuda")
        return y
    """
    (finding,) = lint_source(textwrap.dedent(source), "m.py")
    assert (finding.code, finding.line) == ("CSL201", 10)
    assert "then rebound at line 11" in finding.message


OFFLOADER = """
import torch

class Offloader:
    def onload(self):
        self.stream.synchronize()
        with torch.cuda.stream(self.stream):
            for key, tensor in self.key_to_tensor.items():
                tensor.data = self.host[key].to(self.device, non_blocking=True)

    def offload(self):
        {before}
        for tensor in self.tensor_to_key.keys():
            tensor.data = torch.empty_like(tensor.data, device="cpu")
"""


def test_swapping_out_weights_the_copy_stream_allocated_is_flagged_at_the_swap() -> None:
    """The forward read them on the caller's stream; the next onload may reuse their blocks."""
    (finding,) = lint_source(textwrap.dedent(OFFLOADER.format(before="pass")), "m.py")
    assert (finding.code, finding.line) == ("CSL201", 14)
    assert finding.message.startswith("'tensor' was allocated on side stream 'self.stream' in Offloader.onload()")


@pytest.mark.parametrize(
    "before",
    [
        "torch.cuda.current_stream().synchronize()",
        "self.stream.wait_stream(torch.cuda.current_stream())",
        "if self.record:\n            torch.cuda.synchronize()",
    ],
)
def test_a_swap_out_after_ordering_the_callers_kernels_is_not_flagged(before: str) -> None:
    assert findings(OFFLOADER.format(before=before)) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("non_blocking=True", "copy=True"),  # a blocking move: a one-off, no onload
        ("self.stream.synchronize()", "self.stream.wait_stream(torch.cuda.current_stream())"),  # forked: ordered
    ],
)
def test_a_swap_in_that_is_no_asynchronous_onload_on_an_unordered_stream_is_not_flagged(old: str, new: str) -> None:
    assert findings(OFFLOADER.format(before="pass").replace(old, new)) == []


def test_a_swap_out_inside_a_block_is_not_judged() -> None:
    """A block may enter the copy stream itself: that is a swap-in."""
    source = OFFLOADER.format(before="pass").replace(
        "        for tensor in self.tensor_to_key.keys():\n            tensor.data",
        "        with torch.cuda.stream(self.stream):\n            for tensor in self.tensor_to_key.keys():\n"
        "                tensor.data",
    )
    assert findings(source) == []


@pytest.mark.parametrize("view", ["self.queue.items()", "self.queue.keys()"])
def test_the_keys_of_a_kept_container_used_as_tensors_outlive_the_call(view: str) -> None:
    """An optimizer that keeps its device parameters as the keys of `self.queue` and copies
    the updated host values back into them on a side stream: the caller's forward reads them."""
    target = "p, ready" if view.endswith("items()") else "p"
    source = GROUP.format(item=target, items=view, write="p.copy_(self.host[p], non_blocking=True)", join="")
    assert findings(source) == [("CSL102", WRITE_LINE)]


def test_the_keys_of_a_kept_container_used_only_on_the_host_are_not_tensors() -> None:
    source = GROUP.format(item="name, p", items="self.named.items()", write="self.log.append(name)", join="")
    assert findings(source) == []
