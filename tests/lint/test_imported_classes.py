"""Methods of classes imported from another linted module: `comm = Comm()` (or
`self.comm = Comm()`) with `Comm` from `pkg.comm`, then `comm.send(y)`: the method's summary,
built in its own module, is replayed at the call as for a class of the module."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source
from csan_lint.lint.summaries import PackageIndex

COMM = """
import torch


class Comm:
    def __init__(self):
        self.stream = torch.cuda.Stream()

    def send(self, tensor):
        with torch.cuda.stream(self.stream):
            out = tensor * 2
        torch.cuda.current_stream().wait_stream(self.stream)
        return out
"""
COMM_FORKED = COMM.replace(
    "        with torch.cuda.stream(self.stream):",
    "        self.stream.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.stream):",
)


def findings(caller: str, comm: str = COMM) -> list[tuple[str, int]]:
    package = PackageIndex.build([("src/pkg/comm.py", comm), ("src/pkg/train.py", caller)])
    found = lint_source(textwrap.dedent(caller), "src/pkg/train.py", package=package)
    return sorted((f.code, f.line) for f in found)


LOCAL = """
import torch

from pkg.comm import Comm


def step(model, x):
    comm = Comm()
    y = model(x) * 3
    return comm.send(y)
"""

ON_SELF = """
import torch

from pkg.comm import Comm


class Trainer:
    def __init__(self):
        self.comm = Comm()

    def step(self, model, x):
        y = model(x) * 3
        return self.comm.send(y)
"""


def test_a_side_stream_read_in_an_imported_method_is_reported_at_the_call() -> None:
    assert findings(LOCAL) == [("CSL101", 10)]


def test_through_an_attribute_bound_in_the_constructor() -> None:
    assert findings(ON_SELF) == [("CSL101", 13)]


def test_a_method_that_forks_its_stream_first_is_clean() -> None:
    assert findings(LOCAL, COMM_FORKED) == []


def test_without_the_other_module_nothing_is_known() -> None:
    assert lint_source(textwrap.dedent(LOCAL), "src/pkg/train.py") == []
