"""A function that records one tensor it reads from a holder on the current stream
(`h.a.record_stream(torch.cuda.current_stream())`) says the holder's tensors were made on another
stream: another tensor read from the same holder and used there unrecorded is a CSL201 finding
at its use (lint/siblings.py)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import RECORDED_SIBLINGS, Assumptions
from csan_lint.lint.engine import lint_source

ON = Assumptions.from_switches([(RECORDED_SIBLINGS, True)])
"""The detector is off by default (docs/analysis.md); these tests run it."""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py", assumptions=ON))


COMBINE = """
import torch

def combine(node, output):
    residual = node.state.residual
    extra = {read}
    out = postprocess(output, {use})
    out = out + residual
    {recorded}.record_stream({stream})
{more}
    node.state.residual = None
    return out
"""


def combine(
    read: str = 'getattr(node.state, "extra", None)',
    use: str = "extra",
    recorded: str = "node.state.residual",
    stream: str = "torch.cuda.current_stream()",
    more: str = "",
) -> str:
    return COMBINE.format(read=read, use=use, recorded=recorded, stream=stream, more=more)


def test_a_sibling_used_unrecorded_beside_a_recorded_tensor_is_flagged_at_its_use() -> None:
    found = lint_source(textwrap.dedent(combine()), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found] == [("CSL201", 7)]
    assert "'node.state.extra' is used on the current stream with no record_stream" in found[0].message
    assert "line 9 records its sibling 'node.state.residual' there as made on another stream" in found[0].message


@pytest.mark.parametrize(
    ("read", "use"),
    [("node.state.extra", "extra"), ("None", "node.state.extra"), ("None", "node.state.extra * 2")],
)
def test_a_sibling_read_as_an_attribute_or_used_directly_is_flagged(read: str, use: str) -> None:
    assert findings(combine(read=read, use=use)) == [("CSL201", 7)]


def test_a_record_through_a_local_name_and_a_stream_name_is_evidence_too() -> None:
    more = "    stream = torch.cuda.current_stream()\n    residual.record_stream(stream)"
    source = combine(recorded="node.state.residual", more=more).replace(
        "    node.state.residual.record_stream(torch.cuda.current_stream())\n", ""
    )
    assert findings(source) == [("CSL201", 7)]


@pytest.mark.parametrize(
    "more",
    [
        "    node.state.extra.record_stream(torch.cuda.current_stream())",
        "    if extra is not None:\n        extra.record_stream(torch.cuda.current_stream())",
        "    for name in ('residual', 'extra'):\n"
        "        getattr(node.state, name).record_stream(torch.cuda.current_stream())",
        "    for t in (node.state.extra, node.state.other):\n        t.record_stream(torch.cuda.current_stream())",
    ],
)
def test_a_sibling_recorded_in_any_way_the_text_shows_is_not_flagged(more: str) -> None:
    assert findings(combine(more=more)) == []


@pytest.mark.parametrize(
    ("more", "flagged"),
    [
        ("    torch.cuda.synchronize()", False),
        ("    node.maker.wait_stream(torch.cuda.current_stream())", False),
        ("    torch.cuda.current_stream().wait_stream(node.maker)", True),  # orders the current stream only
    ],
)
def test_a_wait_of_another_stream_may_order_the_maker_after_the_use(more: str, flagged: bool) -> None:
    assert findings(combine(more=more)) == ([("CSL201", 7)] if flagged else [])


@pytest.mark.parametrize(
    ("recorded", "stream"),
    [
        ("node.state.residual", "side"),  # kept for a side stream: says nothing of this stream's uses
        ("self.residual", "torch.cuda.current_stream()"),  # an object's own attributes need not share a stream
        ("node.residual.grad", "torch.cuda.current_stream()"),  # a tensor's grad: its siblings are metadata
    ],
)
def test_no_evidence_without_a_current_stream_record_of_a_held_tensor(recorded: str, stream: str) -> None:
    source = combine(recorded=recorded, stream=stream)
    if recorded.startswith("self."):
        source = source.replace("node.state.", "self.").replace("(node, output)", "(self, output)")
    if recorded.endswith(".grad"):
        source = source.replace("node.state.extra", "node.residual.device")
    assert findings(source) == []


def test_a_sibling_made_in_the_function_is_not_flagged() -> None:
    source = combine(read="node.state.extra", use="extra").replace(
        "    residual = node.state.residual\n",
        "    residual = node.state.residual\n    node.state.extra = torch.ones(4)\n",
    )
    assert findings(source) == []


@pytest.mark.parametrize(
    "use",
    [
        "extra is None",  # looked at only
        "not node.state.flag",
        "len(extra)",
        "Result(extra)",  # a constructor keeps it: escapes
        "node.state.extra.item_count",  # used as an object
        "node.state.layers(output)",  # a callable of the holder
        "torch.cuda.current_stream().wait_stream(node.state.side)",  # a stream
        "sync(node.state.copy_stream)",
    ],
)
def test_host_only_uses_escapes_and_objects_are_not_flagged(use: str) -> None:
    assert findings(combine(use=use)) == []


def test_a_returned_sibling_is_left_to_the_caller() -> None:
    source = combine().replace("    return out\n", "    return out, extra\n")
    assert findings(source) == []


def test_a_sibling_used_only_inside_another_stream_block_is_not_flagged() -> None:
    source = combine(use="output").replace(
        "    out = out + residual\n",
        "    out = out + residual\n    with torch.cuda.stream(side):\n        foo(extra)\n",
    )
    assert findings(source.replace("(node, output)", "(node, output, side)")) == []


def test_a_record_for_a_side_stream_flags_a_sibling_used_in_that_streams_block() -> None:
    source = """
    import torch

    def reduce(bucket, side, other):
        with torch.cuda.stream(side):
            total = bucket.grads * 2 + bucket.scale
        with torch.cuda.stream(other):
            rest = bucket.bias * 2
        bucket.grads.record_stream(side)
        return total, rest
    """
    found = lint_source(textwrap.dedent(source), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found if "sibling" in f.message] == [("CSL201", 6)]
    assert "'bucket.scale' is used on stream 'side' with no record_stream" in found[0].message
