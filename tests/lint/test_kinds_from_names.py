"""`kinds-from-names`: a name nothing binds says what it holds. A finding on a stream only its
name made one says so; one the module binds rests on no name; switched off, a device handle
named so is no longer `torch.cuda`."""

from __future__ import annotations

import textwrap

from csan_lint.lint.analysis.assumptions import BY_NAME, KINDS_FROM_NAMES, Assumptions
from csan_lint.lint.engine import lint_source

COPIER = BY_NAME[KINDS_FROM_NAMES].example
"""A method entering `self.copy_stream`, which nothing in the module binds."""
BOUND = COPIER.replace(
    "class Copier:\n", "class Copier:\n    def __init__(self):\n        self.copy_stream = torch.cuda.Stream()\n\n"
)


def _found(source: str, on: bool = True) -> list[tuple[str, int, bool]]:
    """(code, line, whether it rests on `kinds-from-names`) of each finding."""
    switched = Assumptions.from_switches([(KINDS_FROM_NAMES, on)])
    findings = lint_source(textwrap.dedent(source), "m.py", assumptions=switched)
    return sorted((f.code, f.line, KINDS_FROM_NAMES in f.assumptions) for f in findings)


def test_a_stream_only_its_name_makes_one_says_so() -> None:
    assert ("CSL101", 8, True) in _found(COPIER)
    assert _found(COPIER, on=False) == []


def test_a_stream_the_module_binds_rests_on_no_name() -> None:
    found = _found(BOUND)
    assert ("CSL101", 11, False) in found
    assert _found(BOUND, on=False) == found


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
