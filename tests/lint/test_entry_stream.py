"""The stream a function is entered on: the caller's tensors were written there, and waiting
on `default_stream()` does not order it, since the caller may have made a side stream current."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import ENTRY_STREAM_IS_DEFAULT, Assumptions
from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


BUCKET = """
import torch
from deepspeed.accelerator import get_accelerator

class Reducer:
    def add(self, param: torch.nn.Parameter) -> None:
        if not get_accelerator().resolves_data_dependency():
            self.side.wait_stream({waited})
        with get_accelerator().stream(self.side):
            flat = self.buffer.narrow(0, 0, param.grad.numel())
            flat.copy_(param.grad, non_blocking=True)
            param.grad.record_stream(get_accelerator().current_stream())
"""


def test_a_parameter_gradient_read_after_a_wait_on_the_default_stream_is_flagged() -> None:
    found = lint_source(textwrap.dedent(BUCKET.format(waited="get_accelerator().default_stream()")), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL101", 11)]
    assert "written by the caller on the current stream" in found[0].message


def test_a_wait_on_the_current_stream_orders_it_where_the_device_needs_one() -> None:
    """On a CUDA device `resolves_data_dependency()` is False: the guarded wait always runs."""
    assert findings(BUCKET.format(waited="get_accelerator().current_stream()")) == []


@pytest.mark.parametrize(
    ("test", "flagged"),
    [
        ("get_accelerator().is_synchronized_device()", True),  # False on CUDA: the wait never runs
        ("not get_accelerator().is_synchronized_device()", False),
        ("self.overlap", True),  # either way: the path without the wait stays
    ],
)
def test_device_queries_decide_their_branch(test: str, flagged: bool) -> None:
    source = BUCKET.replace("if not get_accelerator().resolves_data_dependency():", f"if {test}:")
    assert bool(findings(source.format(waited="get_accelerator().current_stream()"))) == flagged


OFFLOADER = """
import torch

class Offloader:
    def __init__(self):
        self.compute = {made}
{rebind}
    def pack(self, activation):
        with self.compute:
            activation.add_(1)
        return activation
"""


@pytest.mark.parametrize("made", ["torch.cuda.current_stream()", "torch.accelerator.current_stream()"])
def test_a_stream_kept_from_construction_is_the_users_current_stream(made: str) -> None:
    """`self.compute = current_stream()` in `__init__` names the stream the object's user runs on:
    work entered on it in another method is on the caller's stream, not a side stream."""
    assert findings(OFFLOADER.format(made=made, rebind="")) == []


@pytest.mark.parametrize(
    ("made", "rebind"),
    [
        ("torch.cuda.current_stream()", "    def use(self, stream):\n        self.compute = stream\n"),
        ("torch.cuda.default_stream()", ""),  # a caller on a side stream: trl's cached default stream
        (  # the current stream kept on another device only
            "torch.cuda.default_stream()\n"
            "        if self.on_npu:\n"
            "            self.compute = torch.npu.current_stream()",
            "",
        ),
    ],
)
def test_a_kept_stream_rebound_or_the_default_stream_is_its_own_stream(made: str, rebind: str) -> None:
    source = textwrap.dedent(OFFLOADER.format(made=made, rebind=rebind))
    write = source.splitlines().index("            activation.add_(1)") + 1
    assert findings(source) == [("CSL102", write)]


def test_a_hook_defined_in_init_sees_the_kept_stream_as_the_current_one() -> None:
    source = """
import torch

class Offloader:
    def __init__(self):
        self.compute = torch.cuda.current_stream()

        def pack(activation):
            with self.compute:
                activation.add_(1)
            return activation

        self.pack = pack
"""
    assert findings(source) == []


def test_both_interpreters_take_default_stream_alike_in_a_function_and_in_a_module() -> None:
    """A host sync of `default_stream()` in a function may leave the caller's side stream running
    (the copy ran there); in a module body the default stream is the current one."""
    source = """
import torch

def fetch(y):
    x = y.to("cpu", non_blocking=True)
    torch.cuda.default_stream().synchronize()
    return x.tolist()

def fetch_current(y):
    x = y.to("cpu", non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return x.tolist()

x = torch.ones(2, device="cuda").to("cpu", non_blocking=True)
torch.cuda.default_stream().synchronize()
print(x.tolist())
"""
    assert findings(source) == [("CSL301", 7)]


def test_the_default_stream_is_named_in_words_and_in_code() -> None:
    source = """
import torch

def fetch(y, s):
    with torch.cuda.stream(torch.cuda.default_stream()):
        x = y.to("cpu", non_blocking=True)
        z = y * 2
    with torch.cuda.stream(s):
        w = z + 1
    return x.tolist(), w
"""
    found = lint_source(textwrap.dedent(source), "m.py")
    assert all("<default>" not in f.message + (f.fix or "") for f in found)
    about_default = [(f.code, f.line) for f in found if "the default stream" in f.message]
    assert ("CSL301", 10) in about_default and ("CSL102", 9) in about_default


GROUP = """
import torch

class BucketGroup:
    def start(self):
        for bucket in self.buckets:
            bucket.grad_data *= bucket.scale
        {before}
        self.comm.wait_stream({waited})
        with torch.cuda.stream(self.comm):
            for bucket in self.buckets:
                torch.distributed.all_reduce(bucket.grad_data)
"""


def test_attributes_used_on_a_side_stream_ordered_after_the_default_stream_are_the_callers() -> None:
    """The wait on `default_stream()` says the data were written before the call; the caller
    wrote them on its current stream, which the wait does not order."""
    found = lint_source(textwrap.dedent(GROUP.format(before="", waited="torch.cuda.default_stream()")), "m.py")
    assert [(f.code, f.line) for f in found] == [("CSL101", 12)]
    assert "'bucket.grad_data' was written by the caller on the current stream" in found[0].message


@pytest.mark.parametrize(
    ("before", "waited"),
    [
        ("", "torch.cuda.current_stream()"),  # the fix: the caller's stream is waited on
        ("self.comm.wait_stream(torch.cuda.current_stream())", "torch.cuda.default_stream()"),
        ("pass", "self.other"),  # no wait on the default stream: attributes are taken as ready
    ],
)
def test_attributes_are_ready_once_the_callers_stream_is_waited_on_or_nothing_says_otherwise(
    before: str, waited: str
) -> None:
    assert findings(GROUP.format(before=before, waited=waited)) == []


def test_a_wait_on_the_callers_stream_on_one_path_only_leaves_the_other_unordered() -> None:
    source = """
    import torch

    class BucketGroup:
        def start(self):
            if self.ready:
                self.comm.wait_stream(torch.cuda.current_stream())
            self.comm.wait_stream(torch.cuda.default_stream())
            with torch.cuda.stream(self.comm):
                torch.distributed.all_reduce(self.flat)
    """
    assert findings(source) == [("CSL101", 10)]


def test_a_wait_on_the_default_stream_orders_the_caller_where_the_entry_is_taken_for_it() -> None:
    """`entry-stream-is-default` on: the function is never called under a side stream."""
    source = textwrap.dedent(BUCKET.format(waited="get_accelerator().default_stream()"))
    on = Assumptions.from_switches([(ENTRY_STREAM_IS_DEFAULT, True)])
    assert lint_source(source, "m.py", assumptions=on) == []
