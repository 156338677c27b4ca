"""Inline suppressions: each comment form, where it applies, and what it must not do."""

from __future__ import annotations

import pytest

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.shell.suppress import ALL, codes_in_comment, filter_suppressed, skips_file

NAMES = {"CSL101": "missing-wait-stream", "CSL102": "missing-join"}


def finding(line: int, code: str = "CSL101", span: tuple[int, int] | None = None) -> Finding:
    start, end = span or (line, line)
    return Finding("m.py", line, 5, code, "msg", line, 9, Span(start, end))


@pytest.mark.parametrize(
    ("comment", "codes"),
    [
        ("# noqa", {ALL}),
        ("# NOQA", {ALL}),
        ("# noqa: CSL101", {"CSL101"}),
        ("# noqa:CSL101,CSL102", {"CSL101", "CSL102"}),
        ("# noqa: CSL101, CSL102", {"CSL101", "CSL102"}),
        ("# noqa: see below", {ALL}),  # flake8: a non-code after `noqa:` is a bare noqa
        ("# csan-lint: ignore[CSL101]", {"CSL101"}),
        ("# csan-lint: ignore[CSL101, missing-join]", {"CSL101", "missing-join"}),
        ("# csan-lint: ignore", {ALL}),
        ("# type: ignore  # noqa: CSL102", {"CSL102"}),
        ("# an ordinary comment", set()),
    ],
)
def test_comment_forms(comment: str, codes: set[str]) -> None:
    assert codes_in_comment(comment) == codes


def test_suppression_on_the_finding_line_or_the_with_line_only() -> None:
    source = (
        "import torch\n"
        "with torch.cuda.stream(s):  # csan-lint: ignore[CSL102]\n"
        "    y = x * 2  # noqa: CSL101\n"
        "    z = y + 1\n"
    )
    on_line = finding(3, "CSL101", span=(2, 4))
    other_code_on_line = finding(3, "CSL103", span=(3, 3))
    via_with_line = finding(4, "CSL102", span=(2, 4))
    not_covered = finding(4, "CSL101", span=(2, 4))
    kept = filter_suppressed([on_line, other_code_on_line, via_with_line, not_covered], source, NAMES)
    assert kept == [other_code_on_line, not_covered]


def test_rule_names_suppress_like_codes() -> None:
    source = "a = 1  # csan-lint: ignore[missing-wait-stream]\nb = 2  # csan-lint: ignore[missing-join]\n"
    kept = filter_suppressed([finding(1), finding(2)], source, NAMES)
    assert kept == [finding(2)]


def test_bare_noqa_suppresses_every_code() -> None:
    source = "x = 1  # noqa\n"
    assert filter_suppressed([finding(1, "CSL101"), finding(1, "CSL201")], source, NAMES) == []


def test_noqa_inside_a_string_suppresses_nothing() -> None:
    source = 's = "# noqa"\n'
    assert filter_suppressed([finding(1)], source, NAMES) == [finding(1)]


def test_untokenizable_source_still_honours_comments() -> None:
    source = "x = (1  # noqa: CSL101\n"  # unclosed bracket: tokenize gives up at EOF
    assert filter_suppressed([finding(1)], source, NAMES) == []


@pytest.mark.parametrize(
    ("source", "skipped"),
    [
        ("# csan-lint: skip-file\nimport torch\n", True),
        ("import torch\n    #csan-lint:skip-file\n", True),
        ("x = 1  # csan-lint: skip-file\n", False),  # only a comment line of its own
        ("# csan-lint: ignore\n", False),
    ],
)
def test_skip_file(source: str, skipped: bool) -> None:
    assert skips_file(source) is skipped
