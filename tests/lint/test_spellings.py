"""Every spelling of entering a stream, and of ordering one, reaches the analyses: the same
unordered read is found (and the same wait orders it) however the code spells the API."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

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
    "enter",
    [
        "with torch.cuda.stream(s):",
        "with torch.cuda.StreamContext(s):",
        "with get_accelerator().stream(s):",
        "with accel.stream(s):",
        "with (contextlib.nullcontext() if flag else torch.cuda.stream(s)):",
        "with on_stream(s):",
        "with self._stream_context(s):",
        "with self.copy_stream:",
    ],
)
def test_a_stream_entered_by_any_spelling(enter: str) -> None:
    body = f"""\
    {enter}
        z = y + 1
    """
    assert _findings(body, "CSL101") == [2]


@pytest.mark.parametrize(
    "enter",
    [
        "ctx = contextlib.nullcontext() if flag else torch.cuda.stream(s)\nwith ctx:",
        "ctx = functools.partial(torch.cuda.stream, s)\nwith ctx():",
        "ctx = self._stream_context(s)\nwith ctx:",
        "s = torch.Stream()\nwith s:",
        "s = get_accelerator().Stream()\nwith s:",
        "stream = self.s1 if flag else self.s0\nwith torch.cuda.stream(stream):",
        "\nwith torch.cuda.stream(self.s1) if flag else torch.cuda.stream(self.s0):",
    ],
)
def test_a_stream_context_bound_or_chosen_first(enter: str) -> None:
    assert _findings(f"{enter}\n    z = y + 1\n", "CSL101") == [3]


@pytest.mark.parametrize(
    "switch",
    [
        "torch.accelerator.set_stream(s)",
        "torch.cuda.set_stream(s)",
    ],
)
def test_setting_the_current_stream(switch: str) -> None:
    body = f"""\
    {switch}
    z = y + 1
    """
    assert _findings(body, "CSL101") == [2]


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
    ],
)
def test_device_generic_orderings_order(wait: str) -> None:
    body = f"{wait}\nwith get_accelerator().stream(s):\n    z = y + 1\n"
    assert _findings(body, "CSL101") == []


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
