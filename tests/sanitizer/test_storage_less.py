"""Tensors with no storage of their own (sparse, wrapper subclasses, nested): the sanitizer
checks what they are made of and keeps checking; it never switches itself off for them."""

from __future__ import annotations

import warnings

import torch
from torch.utils._pytree import tree_map

from csan_lint.runtime import kinds, sanitize
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.sanitizer import CsanSkipWarning
from csan_lint.runtime.tracker import Tracker


class Wrapper(torch.Tensor):
    """A traceable wrapper subclass (as DTensor is): it names its inner tensor."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Wrapper:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda value: value.inner if isinstance(value, Wrapper) else value  # noqa: E731
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


class Opaque(Wrapper):
    """A wrapper that does not say what it holds."""

    __tensor_flatten__ = None


def test_an_op_on_a_wrapper_is_checked_on_its_inner_tensor():
    with sanitize(device="emulated") as sanitizer:
        inner = torch.ones(8, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            Wrapper(inner).mul_(2)
        inner.sum()
    assert [e.kind for e in sanitizer.errors] == [kinds.READ_AFTER_WRITE]
    assert sanitizer.internal_errors == []


def test_an_opaque_wrapper_is_skipped_once_with_a_warning_and_checking_goes_on():
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(8, device="cuda")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Opaque(x).mul_(2)
            Opaque(x).add_(1)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.mul_(2)
        x.sum()
    skips = [w for w in caught if issubclass(w.category, CsanSkipWarning)]
    assert len(skips) == 1 and "Opaque" in str(skips[0].message)
    assert [e.kind for e in sanitizer.errors] == [kinds.READ_AFTER_WRITE]
    assert sanitizer.internal_errors == []


def test_a_sparse_device_tensor_is_checked_on_its_values_and_checking_goes_on():
    # On a GPU a sparse CUDA tensor passes `is_cuda` and has no data pointer: modelled here
    # with an `is_device` that says so for CPU tensors, on two made-up streams.
    internal: list[BaseException] = []
    tracker = Tracker()
    stream = [7]
    mode = SanitizerMode(
        tracker,
        is_device=lambda tensor: True,
        is_pinned=lambda tensor: False,
        current_stream=lambda: stream[0],
        on_internal_error=internal.append,
    )
    sparse = torch.eye(3).to_sparse()
    with mode:
        doubled = sparse * 2
        stream[0] = 8
        doubled._values().sum()
    assert internal == [] and mode.checking
    assert [e.kind for e in tracker.errors] == [kinds.READ_AFTER_WRITE]
