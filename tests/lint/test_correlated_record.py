"""`record_stream` under the condition that chooses the stream: `s = side` plus
`t.record_stream(s)` on one path, `s = current_stream()` on the other. The side stream is
used through `s` only where it was chosen, and recorded there, so releasing `t` after the
block is safe; a record that does not follow the choice of stream protects nothing."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

CHOSEN = """
import torch

def reduce(bucket, side, overlap):
    flat = bucket * 2
    {choose}
    with torch.cuda.stream(stream):
        flat = flat.to(torch.float16)
        flat.div_(2)
"""

RECORDED_WHERE_CHOSEN = """if overlap:
        stream = side
        flat.record_stream(stream)
        stream.wait_stream(torch.cuda.current_stream())
    else:
        stream = torch.cuda.current_stream()"""


def _freed_in_use(choose: str) -> list[int]:
    source = textwrap.dedent(CHOSEN.format(choose=choose))
    return [f.line for f in lint_source(source, "m.py") if f.code == "CSL201"]


def test_a_record_on_the_path_that_chose_the_side_stream_protects_its_use() -> None:
    assert _freed_in_use(RECORDED_WHERE_CHOSEN) == []


@pytest.mark.parametrize(
    "choose",
    [
        RECORDED_WHERE_CHOSEN.replace("flat.record_stream(stream)", "pass"),  # not recorded at all
        # the stream is the side stream on both paths, recorded on one only
        RECORDED_WHERE_CHOSEN.replace("stream = torch.cuda.current_stream()", "stream = side"),
    ],
)
def test_a_use_on_a_path_without_its_record_is_flagged_at_the_rebinding(choose: str) -> None:
    assert _freed_in_use(choose) == [13]
