"""`--fix` and `--diff`: apply the edits rules attach to their findings, verify, repeat.

Edits are whole-line insertions (csan_lint.lint.model.Edit), so formatting and comments stay as
they are. Each pass lints the source (suppressed findings are not fixed), applies the edits of
every fixable finding at once, bottom-up, then checks the result: it must parse, and it must
have fewer findings than before, or the pass is dropped. Passes repeat until nothing is left to
fix, at most `MAX_PASSES` times, so fixing a fixed file changes nothing.

An insertion whose statement already stands on the line it would go to is skipped (an edit
that did not order its hazard is not added again), and of two insertions of the same
statement in one function and pass only the first is made: one join often orders several uses,
and the next pass's lint says whether the second is still needed.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from csan_lint.lint.diagnostics import READ_ERROR_CODE, TOOL_ERROR_CODES, decode_source, diagnostic, read_bytes
from csan_lint.lint.model import NO_SPELLINGS, Edit, Finding, Spellings
from csan_lint.lint.registry import SYNTAX_ERROR_CODE
from csan_lint.lint.rule import Rule
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.runner import LintResult, lint_source, rule_names
from csan_lint.lint.shell.suppress import filter_suppressed

MAX_PASSES = 16
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
"""A line with its ending, split as Python (and LibCST's line numbers) count lines: `\\r\\n`,
`\\r` or `\\n`, not the form feeds and separators `str.splitlines` also splits at."""
_INDENT = re.compile(r"[ \t]*")


@dataclass(frozen=True)
class FixedSource:
    source: str
    fixed: int
    """Findings gone: those at the start less those left (never negative)."""
    remaining: list[Finding]


def fixable(finding: Finding, unsafe: bool) -> bool:
    return bool(finding.edits) and (unsafe or finding.fix_safety == "safe")


def fix_source(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None = None,
    *,
    unsafe: bool = False,
    spellings: Spellings = NO_SPELLINGS,
) -> FixedSource:
    """The source with every certain fix applied, and the findings left in it."""
    findings = _lint(source, path, rules, spellings)
    start = len(findings)
    for _ in range(MAX_PASSES):
        edits = [edit for finding in findings if fixable(finding, unsafe) for edit in finding.edits]
        candidate = apply_edits(source, edits)
        if candidate == source:
            break
        after = _lint(candidate, path, rules, spellings)
        if len(after) >= len(findings) or any(f.code == SYNTAX_ERROR_CODE for f in after):
            break
        source, findings = candidate, after
    return FixedSource(source, max(start - len(findings), 0), findings)


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    """Insert each edit's statement as a line, indented like its anchor line, with the file's
    own line ending; the edits are applied bottom-up, so line numbers stay valid."""
    lines = _LINE.findall(source)
    newline = next((line[len(line.rstrip("\r\n")) :] for line in lines if line.rstrip("\r\n") != line), "\n")
    chosen: dict[tuple[int, str], tuple[Edit, str]] = {}
    for edit in sorted(set(edits), key=lambda edit: (edit.line, edit.text)):
        if not (1 <= edit.anchor_line <= len(lines) and 1 <= edit.line <= len(lines) + 1):
            continue
        indent = _INDENT.match(lines[edit.anchor_line - 1])
        assert indent is not None  # `[ \t]*` matches any string
        statement = f"{indent.group()}{edit.text}"
        if not (_stands_at(lines, edit.line - 1, statement) or _stands_at(lines, edit.line - 2, statement)):
            chosen.setdefault((edit.scope, edit.text), (edit, statement))
    if lines and not lines[-1].endswith(("\n", "\r")) and any(edit.line > len(lines) for edit, _ in chosen.values()):
        lines[-1] += newline
    for edit, statement in sorted(chosen.values(), key=lambda pair: pair[0].line, reverse=True):
        lines.insert(edit.line - 1, statement + newline)
    return "".join(lines)


def _stands_at(lines: list[str], index: int, statement: str) -> bool:
    """The line holds exactly this statement, at this indentation (comments after it allowed)."""
    if not 0 <= index < len(lines):
        return False
    line = lines[index].rstrip("\r\n")
    return line == statement or line.startswith(f"{statement} ") and line[len(statement) :].lstrip().startswith("#")


def _lint(source: str, path: str, rules: Sequence[type[Rule]] | None, spellings: Spellings) -> list[Finding]:
    """The engine's findings less the suppressed ones, as a run reports them."""
    findings = lint_source(source, path, rules, spellings=spellings)
    if not findings or findings[0].code == SYNTAX_ERROR_CODE:
        return findings
    return filter_suppressed(findings, source, rule_names())


@dataclass(frozen=True)
class FixReport:
    fixed: int
    """Findings fixed (written with `--fix`, or that would be with `--diff`)."""
    diff: str
    """Unified diff of every changed file."""
    errors: list[Finding]
    """Files that could not be read back or written: a located diagnostic each."""


def fix_paths(result: LintResult, config: Config, *, write: bool, unsafe: bool = False) -> FixReport:
    """Fix the files `result` has rule findings in; `write` saves them, else only the diff is made.

    The findings of `result` may come from the cache, which keeps no edits: each file is read
    and linted again here, under its own rules and suppressions."""
    paths = sorted({f.path for f in result.findings if f.code in _rule_codes()})
    fixed, diffs, errors = 0, [], []
    for shown in paths:
        path = Path(shown)
        data = read_bytes(path, shown)
        source = decode_source(data, shown) if isinstance(data, bytes) else data
        if isinstance(source, Finding):
            errors.append(source)
            continue
        rules = config.rules_for(path.absolute())
        outcome = fix_source(source, shown, rules, unsafe=unsafe, spellings=config.spellings)
        if outcome.source == source:
            continue
        fixed += outcome.fixed
        diffs.append(unified_diff(source, outcome.source, shown))
        if write:
            assert isinstance(data, bytes)
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # decoded with it above
            try:
                path.write_bytes(outcome.source.encode(encoding))
            except OSError as error:
                errors.append(_write_error(shown, error))
    return FixReport(fixed, "".join(diffs), errors)


def unified_diff(before: str, after: str, path: str) -> str:
    """`git diff` style (`a/`, `b/` before a relative path), so that `git apply` takes it."""
    import difflib  # only for --diff: the text output imports this module for `fixable`

    old, new = (path, path) if Path(path).is_absolute() else (f"a/{path}", f"b/{path}")
    lines = difflib.unified_diff(_LINE.findall(before), _LINE.findall(after), old, new)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _rule_codes() -> frozenset[str]:
    names = rule_names()
    return frozenset(code for code in names if code not in TOOL_ERROR_CODES and code != SYNTAX_ERROR_CODE)


def _write_error(shown: str, error: OSError) -> Finding:
    return diagnostic(shown, READ_ERROR_CODE, f"cannot write fixed file: {error.strerror or error}")
