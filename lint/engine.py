"""Source text in, findings out: parse, analyse the stream flow once, run the rules on it.

Pure on purpose: no file I/O, no configuration, no suppressions. The command line, the
pre-commit hook and `--confirm` all apply those on top of this one function.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from csan_lint.lint.model import NO_SPELLINGS, Finding, Span, Spellings
from csan_lint.lint.registry import SYNTAX_ERROR_CODE, all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.streamflow import analyse
from csan_lint.lint.summaries import PackageIndex


def lint_source(
    source: str,
    path: str,
    rules: Sequence[type[Rule]] | None = None,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
) -> list[Finding]:
    """Parse, analyse, run the given rules (default: all). Pure: no file I/O, no config, no
    suppressions (the shell applies those). `package`: the other linted modules, whose
    functions' summaries calls to them use (without it, only this module's are followed).
    `spellings`: the project's own wrappers of the stream API. A file that does not parse returns exactly one
    Finding with code "CSL001", message "syntax error: <libcst's message>", at the error's
    1-based line/column, span = that line. Findings sorted by (line, column, code)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return [_syntax_error(error, source, path)]
    flow = analyse(module, path, source, package, spellings)
    findings = [
        finding for rule in (all_rules() if rules is None else rules) for finding in rule().check(flow)
    ]
    findings.sort(key=lambda finding: (finding.line, finding.column, finding.code))
    return findings


def _syntax_error(error: cst.ParserSyntaxError, source: str, path: str) -> Finding:
    line, column = _error_position(source) or (error.editor_line, error.editor_column)
    return Finding(
        path=path,
        line=line,
        column=column,
        code=SYNTAX_ERROR_CODE,
        message=f"syntax error: {error.message}",
        end_line=line,
        end_column=column,
        span=Span(line, line),
    )


def _error_position(source: str) -> tuple[int, int] | None:
    """Where CPython's parser stops. libcst's native parser often reports the line after the
    error (`def f(:` at 2:1), so its message is kept but its position is used only as a
    fallback, for code CPython accepts and libcst does not. Runs only for broken files."""
    try:
        compile(source, "<csan-lint>", "exec", flags=0, dont_inherit=True)
    except SyntaxError as error:
        if error.lineno is not None:
            return error.lineno, max(error.offset or 1, 1)
    except ValueError:
        return None
    return None
