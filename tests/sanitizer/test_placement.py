"""Races placed where the user can act, on the emulated device: past decorators' wrappers (told
by their structure, not their names), at a backward hook's copy rather than `loss.backward()`,
with streams named by where they were made, in text and JSON."""

from __future__ import annotations

import functools
import sys

import pytest
import torch

from csan_lint.runtime import kinds, sanitize
from csan_lint.runtime.report import message, render_text, to_json
from csan_lint.runtime.stacks import forwards


def here() -> int:
    return sys._getframe(1).f_lineno


def deprecate_kwarg(old: str, new: str):
    """Like transformers' `utils/deprecation.py`: checks the kwargs, then forwards them all."""

    def decorator(func):
        def wrapped(*args, **kwargs):
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapped

    return decorator


def logged(func):
    """A `functools.wraps` wrapper with the wrapped function's own signature, no `*args`."""

    @functools.wraps(func)
    def call(x, y):
        return func(x, y)

    return call


def keeps_what_it_closes_over(scale):
    def apply(*args, **kwargs):  # a closure over a value, calling nothing it closed over
        return torch.mul(*args, **kwargs) * scale

    return apply


@pytest.fixture
def emulated():
    with sanitize(device="emulated") as sanitizer:
        yield sanitizer


def _only_race(sanitizer, kind):
    found = [e for e in sanitizer.errors if e.kind == kind]
    assert len(found) == 1, "\n\n".join(render_text(e) for e in sanitizer.errors)
    return found[0]


def test_wrappers_are_told_by_structure():
    assert forwards(deprecate_kwarg("a", "b")(torch.add).__code__)
    assert forwards(logged(torch.add).__code__)
    assert not forwards(keeps_what_it_closes_over(2).__code__)
    assert not forwards(deprecate_kwarg.__code__) and not forwards(here.__code__)


@pytest.mark.parametrize("wrap", [deprecate_kwarg("factor", "other"), logged], ids=["forwards-kwargs", "wraps"])
def test_a_race_through_a_decorators_wrapper_is_placed_at_the_caller(emulated, wrap):
    multiply = wrap(torch.mul)
    side = torch.cuda.Stream()
    a = torch.ones(4, device="cuda") * 2
    with torch.cuda.stream(side):
        b = multiply(a, a); line = here()  # noqa: E702  # fmt: skip
    report = _only_race(emulated, kinds.READ_AFTER_WRITE)
    site = to_json(report)["site"]
    assert (site["file"], site["line"], site["access"]) == (__file__, line, "current")
    assert f"`aten::mul.Tensor` at {__file__}:{line} on" in message(report)
    frames = to_json(report)["current"]["stack"]
    assert [f.get("wrapper", False) for f in frames if f["file"] == __file__][-2:] == [False, True]
    del b


def test_a_race_in_a_tensor_hook_is_placed_at_the_hooks_copy(emulated):
    side = torch.cuda.Stream()
    w = torch.ones(4, device="cuda", requires_grad=True)
    grads = torch.empty(4, device="cuda")
    copy_line = here() + 4

    def offload(g):
        with torch.cuda.stream(side):
            grads.copy_(g, non_blocking=True)

    y = w * 3
    y.register_hook(offload)  # y's gradient dies inside backward(), once its node has used it
    y.sum().backward(); backward_line = here()  # noqa: E702  # fmt: skip
    torch.empty(4, device="cuda")  # the default stream may get the gradient's block: the free races
    report = _only_race(emulated, kinds.READ_AFTER_WRITE)
    assert to_json(report)["site"]["line"] == copy_line != backward_line
    frees = [e for e in emulated.errors if e.kind == kinds.FREE_IN_USE]
    assert frees, "\n\n".join(render_text(e) for e in emulated.errors)
    for free in frees:
        # autograd frees the gradient inside backward(): the user acts at the copy that used it
        site = to_json(free)["site"]
        assert (site["access"], site["line"]) == ("previous", copy_line), render_text(free)


def test_a_race_in_a_module_backward_hook_is_placed_at_the_hooks_copy(emulated):
    side = torch.cuda.Stream()
    layer = torch.nn.Linear(4, 4).cuda()
    saved = torch.empty(4, 4, device="cuda")
    copy_line = here() + 4

    def keep(module, grad_input, grad_output):
        with torch.cuda.stream(side):
            saved.copy_(grad_output[0], non_blocking=True)

    layer.register_full_backward_hook(keep)
    layer(torch.ones(4, 4, device="cuda")).sum().backward()
    report = _only_race(emulated, kinds.READ_AFTER_WRITE)
    assert to_json(report)["site"]["line"] == copy_line


def test_streams_are_named_by_where_they_were_made(emulated):
    class Cache:
        def __init__(self):
            self.prefetch_stream = torch.cuda.Stream(); self.line = here()  # noqa: E702  # fmt: skip

    cache = Cache()
    a = torch.ones(4, device="cuda") * 2
    with torch.cuda.stream(cache.prefetch_stream):
        b = a + 1
    report = _only_race(emulated, kinds.READ_AFTER_WRITE)
    name = f"stream created at test_placement.py:{cache.line} (self.prefetch_stream)"
    assert f"on {name} reads memory" in message(report)
    assert f"Access: {name}, reading" in render_text(report)
    current = to_json(report)["current"]
    assert current["stream_name"] == name
    assert current["stream_created"] == {
        "file": __file__, "line": cache.line, "function": "__init__", "name": "self.prefetch_stream",
    }  # fmt: skip
    assert to_json(report)["previous"]["stream_name"] == "the default stream"
    del b


def test_a_stream_made_again_from_its_handle_keeps_its_name(emulated):
    side = torch.cuda.Stream(); made = here()  # noqa: E702  # fmt: skip
    again = torch.cuda.Stream(stream_id=side.stream_id, device_index=side.device_index, device_type=side.device_type)
    a = torch.ones(4, device="cuda") * 2
    with torch.cuda.stream(again):
        b = a + 1
    report = _only_race(emulated, kinds.READ_AFTER_WRITE)
    assert to_json(report)["current"]["stream_created"]["line"] == made
    del b
