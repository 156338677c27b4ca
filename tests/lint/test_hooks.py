"""Hooks (lint/hooks.py): a function registered for autograd or a module to call gets tensors
written on the stream current at the call, so a side stream that reads them must wait first;
the finding says why it takes them as the caller's work. An unregistered function's
unannotated parameter is no such thing (`unannotated-parameters-written-by-caller` is off)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

HOOK = """
import functools
import torch

class Offloader:
    def __init__(self, params, module):
        self.stream = torch.cuda.Stream()

        def copy_grad(p):
            {wait}
            with torch.cuda.stream(self.stream):
                self.host.copy_(p.grad, non_blocking=True)

        for p in params:
            {register}

    def _copy(self, p):
        {wait}
        with torch.cuda.stream(self.stream):
            self.host.copy_(p.grad, non_blocking=True)

    def _forward(self, module, inputs, output):
        {wait}
        with torch.cuda.stream(self.stream):
            self.host.copy_(output, non_blocking=True)
"""

NO_WAIT = "pass"
WAIT = "self.stream.wait_stream(torch.cuda.current_stream())"


def findings(register: str, wait: str) -> list[tuple[str, int, str]]:
    source = textwrap.dedent(HOOK).format(register=register, wait=wait)
    return [(f.code, f.line, f.message) for f in lint_source(source, "m.py")]


@pytest.mark.parametrize(
    ("register", "line"),
    [
        ("p.register_post_accumulate_grad_hook(copy_grad)", 12),
        ("p.register_hook(copy_grad)", 12),
        ("p.register_post_accumulate_grad_hook(self._copy)", 20),
        ("p.register_post_accumulate_grad_hook(hook=self._copy)", 20),
        ("p.register_hook(functools.partial(self._copy))", 20),
    ],
)
def test_a_hook_reads_its_arguments_as_the_callers_work(register: str, line: int) -> None:
    found = findings(register, NO_WAIT)
    assert [(code, at) for code, at, _ in found] == [("CSL101", line)]
    assert found[0][2].endswith("a hook)")
    assert findings(register, WAIT) == []


def test_a_module_hook_reads_the_output_its_module_goes_on_using() -> None:
    """The forward hook's side-stream read of `output` needs a wait before it (CSL101) and,
    since the module hands `output` on when the hook returns, a join after it (CSL103)."""
    register = "module.register_forward_hook(self._forward)"
    assert [(code, at) for code, at, _ in findings(register, NO_WAIT)] == [("CSL101", 25), ("CSL103", 25)]
    assert [(code, at) for code, at, _ in findings(register, WAIT)] == [("CSL103", 25)]


def test_what_a_partial_binds_is_the_registering_codes_not_autograds() -> None:
    """`partial(self._copy, p)`: `p` is bound at registration; the hook gets no argument of
    autograd's, so nothing it reads is taken as written by its caller."""
    assert findings("p.register_hook(functools.partial(self._copy, p))", NO_WAIT) == []


@pytest.mark.parametrize(
    "register", ["pass", "p.register_hook(lambda g: g * 2)", "p.register_hook(other_hook)", "p.register_hook(self)"]
)
def test_a_function_no_registration_names_takes_no_producer_for_granted(register: str) -> None:
    assert findings(register, NO_WAIT) == []


FUNCTION = """
import torch
{imports}


class Reduce({base}):
    @staticmethod
    def forward(ctx, x, stream):
        ctx.stream = stream
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        with torch.cuda.stream(ctx.stream):
            out = grad * 2
        torch.cuda.current_stream().wait_stream(ctx.stream)
        return out, None
"""


@pytest.mark.parametrize(
    ("imports", "base", "flagged"),
    [
        ("", "torch.autograd.Function", True),
        ("from torch.autograd import Function", "Function", True),
        ("from torch.autograd.function import Function", "Function", True),
        ("from mylib import Function", "Function", False),
    ],
)
def test_an_autograd_functions_backward_gets_gradients_written_on_its_entry_stream(
    imports: str, base: str, flagged: bool
) -> None:
    found = [(f.code, f.line, f.message) for f in lint_source(FUNCTION.format(imports=imports, base=base), "m.py")]
    assert [(code, line) for code, line, _ in found] == ([("CSL101", 15)] if flagged else [])
    assert all(message.endswith("passes it to 'Reduce.backward')") for _, _, message in found)


GRADIENT_HOOK = """
import torch

class Reducer:
    def __init__(self, module):
        self.comm = torch.cuda.Stream()
        for p in module.parameters():
            p.register_hook(self.reduce)

    def reduce(self, grad):
        empty = torch.empty_like(grad)
        self.comm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.comm):
            reduced = grad / 2
            self.reduced = reduced
        {join}
        return empty
"""


@pytest.mark.parametrize(
    ("join", "expected"),
    [("pass", [("CSL103", 14)]), ("torch.cuda.current_stream().wait_stream(self.comm)", [])],
)
def test_a_gradient_left_read_on_a_side_stream_at_the_hooks_return_races_autograd(join: str, expected: list) -> None:
    """Autograd goes on with the gradient, or frees it for the replacement the hook returns:
    either way its stream may overwrite it before the side stream's read is done."""
    source = textwrap.dedent(GRADIENT_HOOK).format(join=join)
    assert [(f.code, f.line) for f in lint_source(source, "m.py")] == expected
