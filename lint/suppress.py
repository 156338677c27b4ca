"""Inline suppressions: `# noqa`, `# noqa: CSL101,CSL102`, `# csan-lint: ignore[CSL101]` on a
finding's line or on the first line of its span (the `with` line), and `# csan-lint: skip-file`.

Comments are found with `tokenize`, and only in files that have findings, so that clean files pay
nothing and a `# noqa` inside a string literal suppresses nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Sequence

from csan_lint.lint.model import Finding

ALL = "*"
"""Stands for every code: a bare `# noqa` or `# csan-lint: ignore`."""

_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
"""flake8's form: codes only; `# noqa:` followed by anything else is a bare `# noqa`."""
_IGNORE = re.compile(r"#\s*csan-lint:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"^[ \t]*#[ \t]*csan-lint:[ \t]*skip-file\b", re.MULTILINE)
_CODE_SPLIT = re.compile(r"[\s,]+")


def skips_file(source: str) -> bool:
    """Whether a `# csan-lint: skip-file` comment line opts the whole file out. Checked on the
    text, before parsing, so a skipped file costs no parse."""
    return _SKIP_FILE.search(source) is not None


def codes_in_comment(comment: str) -> set[str]:
    """The codes (or rule names) a comment suppresses; {ALL} for a bare form; empty if none."""
    codes: set[str] = set()
    for pattern in (_NOQA, _IGNORE):
        for match in pattern.finditer(comment):
            listed = match.group("codes")
            if listed is None:
                codes.add(ALL)
            else:
                codes.update(code for code in _CODE_SPLIT.split(listed) if code)
    return codes


def suppressions(source: str) -> dict[int, set[str]]:
    """Line -> codes suppressed on it, from the file's comments."""
    by_line: dict[int, set[str]] = {}
    for line, comment in _comments(source):
        codes = codes_in_comment(comment)
        if codes:
            by_line.setdefault(line, set()).update(codes)
    return by_line


def _comments(source: str) -> list[tuple[int, str]]:
    try:
        return [
            (token.start[0], token.string)
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        # Newer syntax than this interpreter's tokenizer knows (libcst parsed it): fall back to
        # each line's text from its first `#`, which errs towards honouring a suppression.
        lines = enumerate(source.splitlines(), 1)
        return [(number, line[line.index("#"):]) for number, line in lines if "#" in line]


def filter_suppressed(findings: Sequence[Finding], source: str, names: dict[str, str]) -> list[Finding]:
    """The findings not suppressed by a comment on their line or their span's first line.
    `names` maps codes to rule names, so that `ignore[missing-wait-stream]` works too."""
    if not findings:
        return []
    by_line = suppressions(source)
    if not by_line:
        return list(findings)

    def suppressed(finding: Finding) -> bool:
        for line in {finding.line, finding.span.start_line}:
            codes = by_line.get(line, ())
            if ALL in codes or finding.code in codes or names.get(finding.code) in codes:
                return True
        return False

    return [finding for finding in findings if not suppressed(finding)]
