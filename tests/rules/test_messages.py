"""The rendered message and help of one finding per rule, word for word."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Span
from csan_lint.lint.registry import rule_by_code


def _only(code: str, source: str):
    rule = rule_by_code(code)
    assert rule is not None
    [finding] = lint_source(textwrap.dedent(source), "m.py", rules=[rule])
    return finding


def test_missing_wait_stream_message() -> None:
    finding = _only(
        "CSL101",
        """
        import torch

        def f(x, s):
            y = x * 2
            with torch.cuda.stream(s):
                z = y + 1
        """,
    )
    assert finding.message == (
        "'y' was written on the current stream and is read on side stream 's' "
        "with no wait_stream/wait_event between them"
    )
    assert finding.fix == "call `s.wait_stream(torch.cuda.current_stream())` before the `with` block"
    assert (finding.line, finding.column, finding.end_line, finding.end_column) == (7, 13, 7, 14)
    assert finding.span == Span(6, 7)


def test_missing_join_message() -> None:
    finding = _only(
        "CSL102",
        """
        import torch

        def f(x, s):
            with torch.cuda.stream(s):
                y = x * 2
            return y.sum()
        """,
    )
    assert finding.message == (
        "'y' was written on side stream 's' and is read on the current stream "
        "with no wait_stream/wait_event between them"
    )
    assert finding.fix == "join before the use: `torch.cuda.current_stream().wait_stream(s)`"
    assert finding.span == Span(7, 7)


def test_cross_stream_overwrite_message() -> None:
    finding = _only(
        "CSL103",
        """
        import torch

        def f(buf, copy_stream):
            with torch.cuda.stream(copy_stream):
                out = buf * 2
            buf.zero_()
        """,
    )
    assert finding.message == (
        "'buf' is read on side stream 'copy_stream' and then overwritten on the current stream "
        "before the current stream waits for that read"
    )
    assert finding.fix == "call `torch.cuda.current_stream().wait_stream(copy_stream)` before overwriting 'buf'"
    assert (finding.line, finding.column) == (7, 5)


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("del x", "deleted at line 9"),
        ("x = None", "rebound at line 9"),
        ("pass", "released when 'f' returns"),
    ],
)
def test_missing_record_stream_message(release: str, expected: str) -> None:
    finding = _only(
        "CSL201",
        f"""
        import torch

        def f(s, out):
            x = torch.ones(4, device="cuda")
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
            {release}
        """,
    )
    assert finding.message == (
        f"'x' was allocated on the current stream and used on side stream 's', then {expected} "
        "before the current stream waited for that use"
    )
    assert finding.fix == (
        "call `x.record_stream(s)` after the use, or `torch.cuda.current_stream().wait_stream(s)` before releasing 'x'"
    )
    assert finding.span == Span(7, 8)
