"""Inline suppressions: `# noqa`, `# noqa: CSL101,CSL102`, `# csan-lint: ignore[CSL101]` on a
finding's line or on the first line of its span (the `with` line), and `# csan-lint: skip-file`.

Comments are found with `tokenize`, and only in files that have findings, so that clean files pay
nothing and a `# noqa` inside a string literal suppresses nothing.

`unused-noqa` (CSL004, off unless selected, like ruff's RUF100) reports a suppression of ours that
suppresses nothing: a `# noqa` naming a csan-lint code whose rule ran and found nothing there, or a
`# csan-lint: ignore` with nothing to ignore. A bare `# noqa` is left alone: other tools read it.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Collection, Sequence

from csan_lint.lint.model import Finding, Span

ALL = "*"
"""Stands for every code: a bare `# noqa` or `# csan-lint: ignore`."""
UNUSED_NOQA_CODE = "CSL004"
UNUSED_NOQA_NAME = "unused-noqa"

_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
"""flake8's form: codes only; `# noqa:` followed by anything else is a bare `# noqa`."""
_IGNORE = re.compile(r"#\s*csan-lint:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"^[ \t]*#[ \t]*csan-lint:[ \t]*skip-file\b", re.MULTILINE)
_CODE_SPLIT = re.compile(r"[\s,]+")


def skips_file(source: str) -> bool:
    """Whether a `# csan-lint: skip-file` comment line opts the whole file out. Checked on the
    text, before parsing, so a skipped file costs no parse; the substring first, as the pattern
    starts with `^` (tried at every position: a third of the reading phase before any parse)."""
    return "skip-file" in source and _SKIP_FILE.search(source) is not None


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
    for line, _, comment in _comments(source):
        codes = codes_in_comment(comment)
        if codes:
            by_line.setdefault(line, set()).update(codes)
    return by_line


def _comments(source: str) -> list[tuple[int, int, str]]:
    """(line, 0-based column, text) of each comment."""
    try:
        return [
            (*token.start, token.string)
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        # Newer syntax than this interpreter's tokenizer knows (libcst parsed it): fall back to
        # each line's text from its first `#`, which errs towards honouring a suppression.
        lines = enumerate(source.splitlines(), 1)
        return [(number, line.index("#"), line[line.index("#") :]) for number, line in lines if "#" in line]


def _touches(finding: Finding, line: int) -> bool:
    return line in (finding.line, finding.span.start_line)


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


def unused_suppressions(
    findings: Sequence[Finding], source: str, names: dict[str, str], ran: Collection[str], path: str
) -> list[Finding]:
    """`unused-noqa` findings: our directives in `source` that suppress none of `findings` (all of
    the file's, before suppression). Only codes of rules in `ran` count: a directive for a rule not
    run here cannot be judged."""
    if "noqa" not in source.lower() and "csan-lint" not in source:
        return []
    unused: list[Finding] = []
    for line, column, comment in _comments(source):
        here = [finding for finding in findings if _touches(finding, line)]
        for kind, listed in _directives(comment):
            if listed is None:  # a bare csan-lint ignore; a bare noqa comment is not ours alone
                idle = [] if here else ["nothing to suppress on this line"]
            else:
                idle = [
                    code
                    for code in listed
                    if (code in ran or code in {names.get(rule) for rule in ran})
                    and not any(code in (finding.code, names.get(finding.code)) for finding in here)
                ]
            if idle:
                why = idle[0] if listed is None else f"unused: {', '.join(idle)}"
                message = f"unused `{kind}` directive ({why})"
                unused.append(
                    Finding(
                        path,
                        line,
                        column + 1,
                        UNUSED_NOQA_CODE,
                        message,
                        line,
                        column + 1 + len(comment),
                        Span(line, line),
                    )
                )
    return unused


def _directives(comment: str) -> list[tuple[str, list[str] | None]]:
    """(`noqa` or `csan-lint: ignore`, the codes it lists or None when bare) for each of ours."""
    found: list[tuple[str, list[str] | None]] = []
    for match in _NOQA.finditer(comment):
        if match.group("codes") is not None:
            found.append(("noqa", [code.upper() for code in _CODE_SPLIT.split(match.group("codes")) if code]))
    for match in _IGNORE.finditer(comment):
        listed = match.group("codes")
        found.append(
            ("csan-lint: ignore", None if listed is None else [code for code in _CODE_SPLIT.split(listed) if code])
        )
    return found
