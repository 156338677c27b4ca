"""What unknown code returns is a tensor where the body uses it as one, whoever wrote the
function (another package's `gather(k)` as much as the module's own), and a name rebound to a
view of itself keeps what it held. That is an assumption, `unseen-results-are-tensors`: each
finding it makes names it, and switched off, such a result is no tensor."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import UNSEEN_RESULTS_ARE_TENSORS, Assumptions
from csan_lint.lint.engine import lint_source

GATHERED = """
import torch
from pkg.distributed import gather

def attend(k, group, side):
    k_all, _ = gather(k, group)
    {rebind}
    {wait}
    with torch.cuda.stream(side):
        out = torch.index_select(k_all, 0, torch.arange(4, device="cuda"))
    torch.cuda.current_stream().wait_stream(side)
    del out
"""
WAIT = "side.wait_stream(torch.cuda.current_stream())"


def findings(rebind: str = "pass", wait: str = "pass") -> list[tuple[str, int]]:
    source = textwrap.dedent(GATHERED.format(rebind=rebind, wait=wait))
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


def _rests_on(source: str, *, unseen: bool = True) -> list[tuple[str, int, tuple[str, ...]]]:
    """(code, line, assumptions) of each finding, with unseen results taken for tensors or not."""
    switched = Assumptions.from_switches([(UNSEEN_RESULTS_ARE_TENSORS, unseen)])
    return sorted(
        (f.code, f.line, f.assumptions) for f in lint_source(textwrap.dedent(source), "m.py", assumptions=switched)
    )


FORWARDED = """
import torch

def run(model, inputs: torch.Tensor, side: torch.cuda.Stream):
    hidden = {made}
    with torch.cuda.stream(side):
        out = hidden * 2
    torch.cuda.current_stream().wait_stream(side)
    return out
"""


@pytest.mark.parametrize("rebind", ["pass", "k_all = k_all.view(4, -1)", "k_all = k_all[1:]"])
def test_another_packages_result_read_on_a_side_stream_without_a_wait_is_flagged(rebind: str) -> None:
    assert findings(rebind) == [("CSL101", 10)]


def test_a_wait_before_the_block_orders_it() -> None:
    assert findings("k_all = k_all.view(4, -1)", WAIT) == []


def test_a_result_the_body_does_not_use_as_a_tensor_is_not_one() -> None:
    """`size, _ = gather(...)` used only as a number: no tensor, nothing to order."""
    source = GATHERED.replace('torch.index_select(k_all, 0, torch.arange(4, device="cuda"))', "k_all + 1")
    assert sorted(f.code for f in lint_source(textwrap.dedent(source.format(rebind="pass", wait="pass")), "m.py")) == []


def test_a_buffer_torch_save_writes_into_is_host_data() -> None:
    """`torch.save(obj, buffer)` and `torch.frombuffer(buffer.getbuffer())`: no tensor operand."""
    source = """
    import io
    import torch

    def gather(state, chunk, side):
        state_bytes = io.BytesIO()
        torch.save(state, state_bytes)
        view = state_bytes.getbuffer()
        with torch.cuda.stream(side):
            chunk.copy_(torch.frombuffer(view, dtype=torch.uint8), non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
    """
    assert [f.code for f in lint_source(textwrap.dedent(source), "m.py")] == []


@pytest.mark.parametrize("made", ["model(inputs)", "model(inputs) + 1", "-model(inputs)"])
def test_a_finding_on_unseen_codes_result_names_the_assumption(made: str) -> None:
    """A module's forward is code the analysis cannot read: its result, and arithmetic on it, is
    a tensor only by the assumption; off, there is nothing to order."""
    source = FORWARDED.format(made=made)
    assert _rests_on(source) == [("CSL101", 7, (UNSEEN_RESULTS_ARE_TENSORS,))]
    assert _rests_on(source, unseen=False) == []


def test_a_result_the_body_uses_as_a_tensor_rests_on_the_assumption_too() -> None:
    source = GATHERED.format(rebind="k_all = k_all.view(4, -1)", wait="pass")
    assert _rests_on(source) == [("CSL101", 10, (UNSEEN_RESULTS_ARE_TENSORS,))]
    assert _rests_on(source, unseen=False) == []


def test_a_torch_ops_result_rests_on_no_such_assumption() -> None:
    source = FORWARDED.format(made="torch.relu(inputs)")
    found = _rests_on(source)
    assert ("CSL101", 7, ()) in found
    assert _rests_on(source, unseen=False) == found
