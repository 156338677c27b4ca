"""`kinds-from-names`: a name nothing binds says what it holds. A finding on a stream only its
name made one says so; one the module binds rests on no name; switched off, a device handle
named so is no longer `torch.cuda`."""

from __future__ import annotations

import textwrap

from csan_lint.lint.analysis.assumptions import KINDS_FROM_NAMES, Assumptions
from csan_lint.lint.engine import lint_source

COPIER = """
import torch


class Copier:
    def __init__(self):
        {bind}

    def copy(self, x):
        x = x * 2
        with self.copy_stream:
            y = torch.relu(x)
        torch.cuda.current_stream().wait_stream(self.copy_stream)
        return y
"""


def _found(source: str, on: bool = True) -> list[tuple[str, int, bool]]:
    """(code, line, whether it rests on `kinds-from-names`) of each finding."""
    switched = Assumptions.from_switches([(KINDS_FROM_NAMES, on)])
    findings = lint_source(textwrap.dedent(source), "m.py", assumptions=switched)
    return sorted((f.code, f.line, KINDS_FROM_NAMES in f.assumptions) for f in findings)


def test_a_stream_only_its_name_makes_one_says_so() -> None:
    source = COPIER.format(bind="self.other = None")
    assert ("CSL101", 12, True) in _found(source)
    assert _found(source, on=False) == []


def test_a_stream_the_module_binds_rests_on_no_name() -> None:
    source = COPIER.format(bind="self.copy_stream = torch.cuda.Stream()")
    found = _found(source)
    assert ("CSL101", 12, False) in found
    assert _found(source, on=False) == found


def test_a_device_handle_is_torch_cuda_by_its_name_only() -> None:
    source = """
    import torch


    class Shard:
        def run(self, x, side):
            y = x * 2
            with self._device_handle.stream(side):
                z = y + 1
            self._device_handle.current_stream().wait_stream(side)
            return z
    """
    assert [code for code, _, _ in _found(source)] == ["CSL101"]
    assert _found(source, on=False) == []
