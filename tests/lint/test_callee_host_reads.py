"""Host memory a non-blocking download may still be writing, given to a callee: read where the
callee's body reads that parameter on the host (the module's own functions, run with the
argument as their parameter), or, for a callee the analysis cannot see, under the assumption
`unseen-callees-read-downloads`."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, UNSEEN_CALLEES_READ_DOWNLOADS, Assumptions
from csan_lint.lint.hostflow import host_hazards
from csan_lint.lint.streamflow import analyse
from csan_lint.runtime import kinds

OFF = Assumptions.from_switches([(UNSEEN_CALLEES_READ_DOWNLOADS, False)])


def reads(source: str, assumptions: Assumptions = DEFAULT_ASSUMPTIONS) -> set[tuple[int, tuple[str, ...]]]:
    """(line, assumptions) of every host read of a pending download."""
    flow = analyse(cst.parse_module(textwrap.dedent(source)), "m.py", assumptions=assumptions)
    return {
        (flow.line(hazard.node), tuple(sorted(hazard.assumptions)))
        for hazard in host_hazards(flow)
        if hazard.kind == kinds.HOST_READ_PENDING
    }


MODULE = """
import torch

def to_list(value, n=0):
    return value.tolist()

def synced(value):
    torch.cuda.synchronize()
    return value.tolist()

def keep(value, log):
    log.append(value)

def nested(value):
    return to_list(value)

def recursive(value, depth):
    return recursive(value, depth - 1) if depth else None

class Planner:
    def plan(self, count, value):
        return value.numpy().sum()

    def run(self, x):
        host = x.to("cpu", non_blocking=True)
        {use}
"""


@pytest.mark.parametrize(
    "use",
    ["to_list(host)", "to_list(n=1, value=host)", "nested(host)", "self.plan(3, host)",
     "to_list(x.to('cpu', non_blocking=True))"],
)  # fmt: skip
def test_a_callee_of_the_module_that_reads_the_parameter_reads_the_argument(use: str) -> None:
    assert reads(MODULE.format(use=use)) == {(26, ())}


@pytest.mark.parametrize(
    "use",
    ["synced(host)", "keep(host, [])", "recursive(host, 3)", "self.plan(host, 3)", "to_list(*[host])"],
)  # fmt: skip
def test_a_callee_that_syncs_first_keeps_or_reads_another_parameter_reads_nothing(use: str) -> None:
    assert reads(MODULE.format(use=use)) == set()


@pytest.mark.parametrize("use", ["self.module.plan(host)", "fn = self.hooks[0]; fn(host)", "self.hooks[0](host)"])
def test_an_unseen_callee_reads_the_argument_under_the_assumption(use: str) -> None:
    source = MODULE.format(use=use)
    assert reads(source) == {(26, (UNSEEN_CALLEES_READ_DOWNLOADS,))}
    assert reads(source, OFF) == set()


@pytest.mark.parametrize(
    "use", ["len(host)", "isinstance(host, torch.Tensor)", "Planner(host)", "self.log.append(host)"]
)
def test_builtins_that_look_only_classes_and_storing_methods_read_nothing(use: str) -> None:
    assert reads(MODULE.format(use=use)) == set()


def test_an_unseen_callee_the_callee_hands_it_to_carries_the_assumption_to_the_call() -> None:
    source = MODULE.replace("return value.tolist()\n\ndef synced", "return n.plan(value)\n\ndef synced")
    assert reads(source.format(use="to_list(host, self)")) == {(26, (UNSEEN_CALLEES_READ_DOWNLOADS,))}
    assert reads(source.format(use="to_list(host, self)"), OFF) == set()
