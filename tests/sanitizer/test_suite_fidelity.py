"""Defects found by running public test suites under the sanitizer on the emulated device
(issue 14): each test is a minimal case of our own with the pattern that misled it."""

from __future__ import annotations

import torch

from csan_lint.runtime import kinds, sanitize


def test_set_onto_another_storage_touches_no_bytes():
    """`set_` only re-points a tensor's metadata: on a side stream that never waited it is
    not a write of the storage it points at."""
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(4, device="cuda")
        with torch.cuda.stream(torch.cuda.Stream()):
            alias = x.new_empty([0]).set_(x.untyped_storage())
        torch.cuda.synchronize()
    assert sanitizer.errors == []
    assert alias.data_ptr() == x.data_ptr()


def test_writes_through_a_set_tensor_are_writes_of_its_new_storage():
    with sanitize(device="emulated") as sanitizer:
        x = torch.ones(4, device="cuda")
        alias = x.new_empty([0]).set_(x.untyped_storage())
        with torch.cuda.stream(torch.cuda.Stream()):
            alias.add_(1)
        torch.cuda.synchronize()
    assert [error.kind for error in sanitizer.errors] == [kinds.WRITE_AFTER_WRITE]
    assert "aten::add_" in sanitizer.errors[0].current.operator
