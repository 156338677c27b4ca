"""What the module's calls give a function holds inside it (the host as a device, `True` for
`non_blocking=`), and a function that returns a pending download hands one to its callers: the
host reads it where they read the result (lint/hostfacts.py `Given`, lint/hostflow.py); a dtype
conversion of a pending download is a host read of it (lint/devices.py)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.hostflow import host_hazards
from csan_lint.lint.streamflow import analyse
from csan_lint.runtime import kinds


def read_lines(source: str) -> set[int]:
    """The lines of every host read of a pending download."""
    flow = analyse(cst.parse_module(textwrap.dedent(source)), "m.py")
    return {flow.line(hazard.node) for hazard in host_hazards(flow) if hazard.kind == kinds.HOST_READ_PENDING}


MOVE = """
import torch

def move(arg, device, share=False):
    arg = arg.detach().to(device, non_blocking=True)
    if share:
        arg = arg.share_memory_()
    return arg

def send(outputs):
    return [move(out, {device}, share=True) for out in outputs]
"""


@pytest.mark.parametrize(
    ("device", "lines"),
    [
        ('"cpu"', {7}),
        ('torch.device("cpu")', {7}),
        ('device="cpu"', {7}),
        ('"cuda"', set()),
        ("self_device", set()),
    ],
)
def test_a_device_some_call_gives_places_the_copy(device: str, lines: set[int]) -> None:
    assert read_lines(MOVE.format(device=device)) == lines


FLAG = """
import torch

class Batch:
    def to(self, device, non_blocking{default}):
        host = self.data.to("cpu", non_blocking=non_blocking)
        return host.numpy().sum()

    def run(self):
        return self.to("cpu"{given})
"""


@pytest.mark.parametrize(
    ("default", "given", "lines"),
    [
        ("=True", "", {7}),
        ("=False", ", non_blocking=True", {7}),
        ("=False", ", True", {7}),
        ("=False", "", set()),
        ("", ", non_blocking=False", set()),
    ],
)
def test_non_blocking_true_at_some_call_or_by_default(default: str, given: str, lines: set[int]) -> None:
    assert read_lines(FLAG.format(default=default, given=given)) == lines


def test_rebinding_the_parameter_drops_what_calls_gave() -> None:
    source = """
    import torch

    def move(x, device):
        device = torch.device("cuda")
        y = x.to(device, non_blocking=True)
        return y.tolist()

    def run(x):
        return move(x, "cpu")
    """
    assert read_lines(source) == set()


RETURNED = """
import torch

def fetch(x):
    return x.to("cpu", non_blocking=True).requires_grad_(x.requires_grad)

def fetch_named(x):
    y = x.to("cpu", non_blocking=True)
    return y

def fetch_synced(x):
    y = x.to("cpu", non_blocking=True)
    torch.cuda.synchronize()
    return y

class Loader:
    def fetch(self, x):
        return fetch_named(x)

    def use(self, x):
        y = {call}
        {between}
        return y.tolist()
"""


@pytest.mark.parametrize(
    ("call", "between", "lines"),
    [
        ("fetch(x)", "pass", {23}),
        ("fetch_named(x)", "pass", {23}),
        ("self.fetch(x)", "pass", {23}),
        ("fetch(x)", "torch.cuda.current_stream().synchronize()", set()),
        ("fetch_synced(x)", "pass", set()),
        ("x.cpu()", "pass", set()),
    ],
)
def test_a_returned_download_is_read_where_the_caller_reads_it(call: str, between: str, lines: set[int]) -> None:
    assert read_lines(RETURNED.format(call=call, between=between)) == lines


def test_a_recursive_function_ends() -> None:
    source = """
    import torch

    def fetch(x, depth):
        if depth:
            return fetch(x, depth - 1)
        return x.to("cpu", non_blocking=True)

    def use(x):
        y = fetch(x, 3)
        return y.tolist()
    """
    assert read_lines(source) == {11}


@pytest.mark.parametrize(
    ("use", "lines"),
    [
        ("host.to(torch.float32)", {6}),  # the host converts it now
        ("host.to(x.dtype)", {6}),
        ("host.to('cuda', non_blocking=True)", set()),  # an upload: in stream order after the download
        ("host.to(device)", set()),  # a device the code does not name
    ],
)
def test_a_conversion_of_a_pending_download_reads_it(use: str, lines: set[int]) -> None:
    source = f"""
    import torch

    def f(x, device):
        host = x.to("cpu", non_blocking=True)
        return {use}
    """
    assert read_lines(source) == lines
