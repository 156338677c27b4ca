"""Every spelling of entering a stream, and of ordering one, reaches the analyses: the same
unordered read is found (and the same wait orders it) however the code spells the API."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.runner import lint_paths

_MODULE = """\
import contextlib
import functools
import torch
from deepspeed.accelerator import get_accelerator

accel = get_accelerator()


@contextlib.contextmanager
def on_stream(stream):
    if stream is None:
        yield
    else:
        with get_accelerator().stream(stream):
            yield


class Layer:
    def _stream_context(self, stream):
        return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)

    def run(self, x, s, flag):
        y = x * 2
{body}
"""
_FIRST_BODY_LINE = _MODULE.splitlines().index("{body}") + 1


def _findings(body: str, code: str) -> list[int]:
    """Lines (counted from the body's first) of the findings of `code`."""
    source = _MODULE.format(body=textwrap.indent(textwrap.dedent(body), " " * 8))
    return [f.line - _FIRST_BODY_LINE + 1 for f in lint_source(source, "m.py") if f.code == code]


@pytest.mark.parametrize(
    "body",
    [
        "with torch.cuda.stream(s):\n    z = y + 1",
        "with torch.cuda.StreamContext(s):\n    z = y + 1",
        "with get_accelerator().stream(s):\n    z = y + 1",
        "with accel.stream(s):\n    z = y + 1",
        "with (contextlib.nullcontext() if flag else torch.cuda.stream(s)):\n    z = y + 1",
        "with on_stream(s):\n    z = y + 1",
        "with self._stream_context(s):\n    z = y + 1",
        "with self.copy_stream:\n    z = y + 1",
        "ctx = contextlib.nullcontext() if flag else torch.cuda.stream(s)\nwith ctx:\n    z = y + 1",
        "ctx = functools.partial(torch.cuda.stream, s)\nwith ctx():\n    z = y + 1",
        "ctx = self._stream_context(s)\nwith ctx:\n    z = y + 1",
        "s = torch.Stream()\nwith s:\n    z = y + 1",
        "s = get_accelerator().Stream()\nwith s:\n    z = y + 1",
        "stream = self.s1 if flag else self.s0\nwith torch.cuda.stream(stream):\n    z = y + 1",
        "with torch.cuda.stream(self.s1) if flag else torch.cuda.stream(self.s0):\n    z = y + 1",
        "torch.accelerator.set_stream(s)\nz = y + 1",
        "torch.cuda.set_stream(s)\nz = y + 1",
    ],
)
def test_a_stream_entered_by_any_spelling(body: str) -> None:
    """Bound first, chosen at run time or set: the read of `y` on the stream is unordered."""
    assert _findings(body, "CSL101") == [len(body.splitlines())]  # the last line reads `y`


def test_an_exit_stack_enters_until_its_block_ends() -> None:
    body = """\
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.cuda.stream(s))
        z = y + 1
    w = y + 1
    """
    assert _findings(body, "CSL101") == [3]


@pytest.mark.parametrize(
    "wait",
    [
        "s.wait_stream(torch.accelerator.current_stream())",
        "s.wait_stream(get_accelerator().current_stream())",
        "s.wait_stream(accel.current_stream())",
        "torch.accelerator.synchronize()",
        "get_accelerator().synchronize()",
        "e = torch.Event()\ne.record()\ns.wait_event(e)",
        "e = get_accelerator().Event()\ne.record()\ns.wait_event(e)",
        "s.wait_stream(self.context.current_stream())",
        "current = ctx.current_stream()\ns.wait_stream(current)",
    ],
)
def test_device_generic_orderings_order(wait: str) -> None:
    body = f"{wait}\nwith get_accelerator().stream(s):\n    z = y + 1\n"
    assert _findings(body, "CSL101") == []


def test_a_project_method_named_current_stream_is_no_other_stream() -> None:
    """`ctx.current_stream()` (a project's helper, Megatron's) is the stream current where it is
    called, so waiting on it after the block joins the side stream; a method of another name
    is no stream at all."""
    joined = "with torch.cuda.stream(s):\n    z = y + 1\nctx.current_stream().wait_stream(s)\nw = z * 2\n"
    assert _findings(joined, "CSL102") == []
    assert _findings(joined.replace("current_stream", "compute_stream"), "CSL102") == [4]


@pytest.mark.parametrize(
    "event",
    ["torch.Event()", "get_accelerator().Event()", "accel.Event()", "torch.cuda.Event()"],
)
def test_waiting_on_a_device_generic_event_never_recorded(event: str) -> None:
    body = f"""\
    e = {event}
    s.wait_event(e)
    """
    assert _findings(body, "CSL401") == [2]


_WRAPPED = """\
import torch
from mypkg.cuda_utils import on_stream


def f(x, s):
    y = x * 2
    with on_stream(s):
        z = y + 1
    return z
"""


def test_a_project_wrapper_named_in_the_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file mentions no torch stream API: without the setting the prefilter skips it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user.py").write_text(_WRAPPED)
    unconfigured = lint_paths(["."], load_config(["."]), jobs=1)
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nstream-contexts = ["mypkg.cuda_utils.on_stream"]\n')
    configured = lint_paths(["."], load_config(["."]), jobs=1)
    assert (unconfigured.files_parsed, unconfigured.findings) == (0, [])
    assert [(f.code, f.line) for f in configured.findings if f.code == "CSL101"] == [("CSL101", 8)]


@pytest.mark.parametrize(
    "choose",
    [
        "if flag:\n    ctx = functools.partial(torch.cuda.stream, stream=s)\nelse:\n    ctx = contextlib.suppress\n",
        "if flag:\n    ctx = functools.partial(torch.npu.stream, s)\n"
        "else:\n    ctx = functools.partial(torch.cuda.stream, s)\n",
        "ctx = contextlib.nullcontext\nif flag:\n    ctx = functools.partial(torch.cuda.stream, s)\n",
    ],
)
def test_a_context_chosen_by_if_else(choose: str) -> None:
    assert _findings(f"{choose}with ctx():\n    z = y + 1\n", "CSL101") == [choose.count("\n") + 2]


@pytest.mark.parametrize(
    ("fork", "flagged"),
    [
        ("s.wait_stream(torch.cuda.current_stream())\n    ", []),  # ordered where `s` is entered
        ("", [6]),
    ],
)
def test_a_wait_under_the_condition_that_chooses_the_context(fork: str, flagged: list[int]) -> None:
    """Megatron's async collectives: the side stream waits, and its context is chosen, under the
    same `if`; the other path enters no stream (`nullcontext()`), so nothing there needs the wait."""
    choose = f"if flag:\n    {fork}ctx = torch.cuda.stream(s)\nelse:\n    ctx = contextlib.nullcontext()\n"
    body = f"{choose}with ctx:\n    z = y + 1\n"
    assert _findings(body, "CSL101") == [line + fork.count("\n") for line in flagged]


def test_a_stream_attribute_made_in_another_method() -> None:
    """`self.side` is no stream by its name; the module assigns it one in `__init__`."""
    source = """\
import torch


class Offload:
    def __init__(self):
        self.side = torch.Stream()

    def pack(self, x):
        y = x * 2
        with self.side:
            z = y + 1
        return z
"""
    assert [(f.code, f.line) for f in lint_source(source, "m.py") if f.code == "CSL101"] == [("CSL101", 11)]


def test_a_device_module_chosen_at_run_time() -> None:
    source = """\
import contextlib
import torch


class Group:
    def __init__(self, stream):
        self.stream = stream
        self.accel = getattr(torch, torch.accelerator.current_accelerator().type) if ok else torch.cuda

    def onload(self, x):
        y = x * 2
        context = contextlib.nullcontext() if self.stream is None else self.accel.stream(self.stream)
        with context:
            z = y + 1
        return z
"""
    assert [(f.code, f.line) for f in lint_source(source, "m.py") if f.code == "CSL101"] == [("CSL101", 14)]


def test_a_stream_chosen_by_a_conditional_expression_is_one_of_its_sides() -> None:
    """`cur` is the current stream whenever it is a stream: waiting on it orders the block."""
    body = (
        "cur = torch.cuda.current_stream() if flag else None\n"
        "s.wait_stream(cur)\nwith torch.cuda.stream(s):\n    z = y + 1\n"
    )
    assert _findings(body, "CSL101") == []
    assert _findings(body.replace("s.wait_stream(cur)", "s.wait_stream(other)"), "CSL101") == [4]


def test_a_helper_entering_a_stream_through_a_wrapper_makes_a_producer() -> None:
    """`use` has no `with` of its own: it is interpreted because `fill` writes on a side stream."""
    source = """\
import contextlib
import torch


@contextlib.contextmanager
def on_stream(stream):
    with torch.cuda.stream(stream):
        yield


def fill(buf, side):
    side.wait_stream(torch.cuda.current_stream())
    with on_stream(side):
        buf.copy_(torch.ones(4, device="cuda"))


def use(s):
    buf = torch.empty(4, device="cuda")
    fill(buf, s)
    return buf.sum()
"""
    assert [(f.code, f.line) for f in lint_source(source, "m.py")] == [("CSL102", 20)]


def test_a_stream_chosen_at_run_time_is_one_of_its_sides() -> None:
    source = """\
import torch


class Offload:
    def __init__(self):
        self.s0 = torch.accelerator.current_stream()
        self.s1 = torch.Stream()

    def pack(self, x, flag):
        y = x * 2
        stream = self.s1 if flag else self.s0
        with torch.cuda.stream(stream):
            z = y + 1
        return z
"""
    found = lint_source(source, "m.py")
    assert ("CSL101", 13) in [(f.code, f.line) for f in found]
    # named by the choice on which it races: self.s0, kept from current_stream(), is the caller's
    assert all("side stream 'self.s1'" in f.message and "<current>" not in f.message for f in found)
