"""A tensor a side stream's pool allocated, stored in an attribute of the caller's objects (an
argument, an item of one): handed to the caller as a returned one is, it needs `record_stream`
of the caller's stream before the caller uses and drops it (CSL201)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

MOVE = """
import torch

class Mover:
    def move(self, items, device):
        pending = {pending}
        current = torch.cuda.current_stream()
        with torch.cuda.stream({stream}):
            for it in pending:
                it.feature = it.feature.to(device, non_blocking=True)
        current.wait_stream(self.h2d)
        {after}
"""


def freed(**parts: str) -> list[tuple[str, int]]:
    values = {"pending": "[it for it in items if it.feature is not None]", "stream": "self.h2d", "after": "pass"}
    source = textwrap.dedent(MOVE.format(**(values | parts)))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py") if f.code == "CSL201")


@pytest.mark.parametrize("pending", ["[it for it in items if it.feature is not None]", "items", "items[1:]"])
def test_stored_in_the_callers_objects_on_a_side_stream_is_handed_back(pending: str) -> None:
    assert freed(pending=pending) == [("CSL201", 10)]


@pytest.mark.parametrize(
    "after",
    [
        "for it in pending:\n            it.feature.record_stream(current)",  # the fix
        "return None\n\n    def other(self):\n        pass",  # nothing else: still handed back
    ],
)
def test_a_record_of_the_callers_stream_protects_it(after: str) -> None:
    expected = [] if "record_stream" in after else [("CSL201", 10)]
    assert freed(after=after) == expected


def test_allocated_on_the_callers_stream_needs_no_record() -> None:
    assert freed(stream="torch.cuda.current_stream()") == []


def test_objects_the_function_makes_are_not_the_callers() -> None:
    assert freed(pending="[Holder() for _ in items]") == []


def test_an_attribute_of_self_is_not_handed_back_through_an_argument() -> None:
    source = MOVE.replace("it.feature = it.feature.to", "self.feature = it.feature.to")
    found = [
        (f.code, f.line)
        for f in lint_source(textwrap.dedent(source.format(pending="items", stream="self.h2d", after="pass")), "m.py")
        if f.code == "CSL201"
    ]
    assert ("CSL201", 10) not in found
