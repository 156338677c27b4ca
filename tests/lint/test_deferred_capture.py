"""A callable built with the current stream fixed in it (a partial, a lambda, a nested def) that
leaves its function runs later on the stream of build time: CSL104 (stale-stream-capture) at the captured stream, unless
the callable is only called where it is built or uses the stream only to enter it or to order."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.rules.stale_stream_capture import StaleStreamCapture


def findings(source: str, spellings: Spellings = NO_SPELLINGS) -> list[tuple[str, int]]:
    found = lint_source(textwrap.dedent(source), "m.py", rules=[StaleStreamCapture], spellings=spellings)
    return sorted((f.code, f.line) for f in found)


DELAYED = """
import functools
import torch

def backward(op, x, dy, out):
    gemm = functools.partial(
        wgrad_kernel,
        stream=torch.cuda.current_stream().cuda_stream,
    )
    if op.delay:
        op.store.put([x, dy, out], gemm)
    else:
        gemm(x, dy, out)
"""


def test_a_partial_kept_for_later_with_the_current_stream_handle_is_flagged_at_the_capture() -> None:
    found = lint_source(textwrap.dedent(DELAYED), "m.py", rules=[StaleStreamCapture])
    assert [(f.code, f.line) for f in found] == [("CSL104", 8)]
    assert "'gemm' is built with the current stream fixed in it" in found[0].message
    assert "passed to 'op.store.put' at line 11" in found[0].message
    assert "resolve the stream when 'gemm' runs" in (found[0].fix or "")
    assert (found[0].span.start_line, found[0].span.end_line) == (6, 11)


def test_the_same_partial_resolving_the_stream_when_it_runs_is_clean() -> None:
    fixed = DELAYED.replace("        stream=torch.cuda.current_stream().cuda_stream,\n", "")
    assert findings(fixed) == []


def test_a_partial_called_where_it_is_built_and_not_kept_is_clean() -> None:
    called = DELAYED.replace("    if op.delay:\n        op.store.put([x, dy, out], gemm)\n    else:\n    ", "")
    assert findings(called) == []


BUILD = """
import functools
import torch

def build(self, x, key, side):
    {body}
"""


@pytest.mark.parametrize(
    ("build", "line"),
    [
        # a stream bound first, the callable stored on self
        ("s = torch.cuda.current_stream()\n    self.run = functools.partial(kernel, x, s)", 7),
        # its handle bound first, the callable returned
        ("h = torch.cuda.current_stream().cuda_stream\n    return functools.partial(kernel, x, stream=h)", 7),
        # a lambda's default, appended to a list
        ("self.pending.append(lambda s=torch.cuda.current_stream(): kernel(x, s))", 6),
        # a lambda's free name, kept in a dict
        ("s = torch.cuda.current_stream()\n    self.jobs[key] = lambda: kernel(x, stream=s)", 7),
        # the device-generic spelling
        ("s = torch.accelerator.current_stream()\n    self.run = functools.partial(kernel, x, s)", 7),
    ],
)
def test_a_callable_holding_the_current_stream_that_leaves_the_function_is_flagged(build: str, line: int) -> None:
    assert findings(BUILD.format(body=build)) == [("CSL104", line)]


NESTED = """
import torch

def make_hook(x):
    stream = torch.cuda.current_stream()

    def hook(grad):
        {body}

    return hook
"""


def test_a_nested_def_launching_on_a_captured_stream_and_returned_is_flagged_at_the_use() -> None:
    found = lint_source(
        textwrap.dedent(NESTED.format(body="fused_kernel(grad, x, stream=stream.cuda_stream)")),
        "m.py",
        rules=[StaleStreamCapture],
    )
    assert [(f.line, f.column) for f in found] == [(8, 38)]
    assert "'hook' is built with the current stream fixed in it ('stream.cuda_stream') and is returned" in (
        found[0].message
    )


@pytest.mark.parametrize(
    "body",
    [
        # the callable says where its work runs
        "with torch.cuda.stream(stream):\n            out = grad * 2\n        return out",
        # ordering only: nothing is launched on the captured stream
        "stream.wait_stream(x.side)",
        "grad.record_stream(stream)",
        # resolved when it runs
        "fused_kernel(grad, stream=torch.cuda.current_stream())",
        # its own name, bound inside
        "stream = torch.cuda.current_stream()\n        fused_kernel(grad, stream=stream)",
    ],
)
def test_a_nested_def_entering_ordering_or_resolving_the_stream_is_clean(body: str) -> None:
    assert findings(NESTED.format(body=body)) == []


@pytest.mark.parametrize(
    "keep",
    [
        # inside the block, the current stream is the side stream: an explicit choice
        "with torch.cuda.stream(side):\n        self.run = functools.partial(kernel, x, torch.cuda.current_stream())",
        # a stream the object chose, not the current one
        "self.run = functools.partial(kernel, x, side)",
        # rebound to another stream before the callable is built
        "s = torch.cuda.current_stream()\n    s = side\n    self.run = functools.partial(kernel, x, s)",
        # an ordering method bound for later launches nothing
        "self.join = functools.partial(side.wait_stream, torch.cuda.current_stream())",
        # used for the block of a `with`, or called at once by a builtin
        "with hooks(functools.partial(kernel, x, torch.cuda.current_stream())):\n        run(x)",
        "return sorted(x, key=functools.partial(kernel, torch.cuda.current_stream()))",
        # registered, then removed in the same function
        "h = x.register_hook(functools.partial(kernel, torch.cuda.current_stream()))\n    run(x)\n    h.remove()",
    ],
)
def test_captures_that_cannot_run_on_a_stale_stream_later_are_clean(keep: str) -> None:
    assert findings(BUILD.format(body=keep)) == []


def test_a_hook_registered_by_a_method_and_kept_is_flagged() -> None:
    source = """
    import torch

    class Reducer:
        async def attach(self, param):
            stream = torch.cuda.current_stream()

            def reduce(grad):
                self.buckets.append(
                    fused_reduce(grad, stream),
                )

            param.register_hook(reduce)
    """
    found = lint_source(textwrap.dedent(source), "m.py", rules=[StaleStreamCapture])
    assert [(f.code, f.line) for f in found] == [("CSL104", 10)]
    assert "'reduce' is built with the current stream fixed in it ('stream')" in found[0].message
    assert "passed to 'param.register_hook' at line 13" in found[0].message


def test_a_project_current_stream_wrapper_is_a_current_stream() -> None:
    source = """
    import functools
    import torch
    from pkg.streams import get_stream

    def build(self, x):
        self.run = functools.partial(kernel, x, get_stream())
    """
    assert findings(source) == []
    assert findings(source, Spellings(current_stream=("pkg.streams.get_stream",))) == [("CSL104", 7)]
