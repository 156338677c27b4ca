"""Modules moved in place: `model.cuda()`, `model.half()`, `model.to(device)` with the result
dropped can only be a module (a tensor's move returns a copy), whose parameters the move writes
on the current stream. Wrapping it (`Wrapper(module=model)`, a DDP-like constructor that copies
or broadcasts the parameters) or calling it inside a side-stream block reads them there, so the
side stream must wait for the move first (Megatron's get_model before and after its fix, in our
own words)."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source

SETUP = """
import torch

def setup(build, device):
    model = build()
    {before}
    {move}
    with torch.cuda.stream({stream}):
        {inside}
        {use}
"""

LOOP_MOVE = "for chunk in model:\n        chunk.cuda(device)"
WRAP_ITEMS = "wrapped = [Wrapper(module=m, first=i == 0) for i, m in enumerate(model)]"


def findings(
    *,
    move: str = "model.cuda(device)",
    use: str = "wrapped = Wrapper(module=model)",
    before: str = "pass",
    inside: str = "pass",
    stream: str = "torch.cuda.Stream()",
) -> list[tuple[str, int]]:
    source = textwrap.dedent(SETUP).format(before=before, move=move, stream=stream, inside=inside, use=use)
    return sorted((f.code, f.line) for f in lint_source(source, "m.py"))


def test_a_module_moved_then_wrapped_on_a_side_stream_is_read_before_the_move_is_waited() -> None:
    assert ("CSL101", 10) in findings()


def test_the_items_of_a_list_of_modules_moved_in_a_loop_are_read_by_their_wrappers() -> None:
    flagged = findings(move=LOOP_MOVE, use=WRAP_ITEMS)
    assert [code for code, line in flagged if line == 11] == ["CSL101"]


def test_calling_a_moved_module_on_a_side_stream_reads_its_parameters() -> None:
    assert ("CSL101", 10) in findings(use="wrapped = model(torch.ones(2, device=device))")


def test_a_side_stream_that_waits_for_the_move_is_not_flagged() -> None:
    wait = "side = torch.cuda.Stream()"
    ordered = "side.wait_stream(torch.cuda.current_stream())"
    moved = f"model.half()\n    {ordered}"
    assert findings(before=wait, move=moved, stream="side") == []
    assert findings(before=wait, move=f"{LOOP_MOVE}\n    {ordered}", stream="side", use=WRAP_ITEMS) == []


def test_a_module_moved_on_the_side_stream_itself_is_not_flagged() -> None:
    assert findings(move="pass", inside="model.to(device)") == []
    assert findings(move="pass", inside=LOOP_MOVE.replace("\n", "\n    "), use=WRAP_ITEMS) == []


def test_a_tensor_whose_moved_copy_is_kept_stays_a_tensor_handed_to_a_constructor() -> None:
    """`y = x.cuda()` keeps the copy: `x` is no module, and building an object from a tensor
    stores it without reading it."""
    assert findings(move="moved = model.cuda(device)") == []


def test_a_moved_modules_own_methods_launch_nothing() -> None:
    """`model.eval()`, `model.parameters()` set flags or hand out the parameters on the host."""
    assert findings(use="model.eval()") == []
    assert findings(use="wrapped = list(model.parameters())") == []
